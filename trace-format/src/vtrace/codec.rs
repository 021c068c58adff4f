//! Byte-level helpers of the `.vtrace` format: LEB128 varints and zigzag signed integers.

/// Appends `value` as an unsigned LEB128 varint.
#[inline]
pub(crate) fn put_uv(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends `value` zigzag-encoded as a varint (small magnitudes of either sign stay short).
#[inline]
pub(crate) fn put_sv(out: &mut Vec<u8>, value: i64) {
    put_uv(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Reads values out of a decompressed chunk payload; every read is bounds-checked.
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

/// A payload ended early or held a malformed varint.
#[derive(Debug)]
pub(crate) struct Malformed;

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// Whether every byte was consumed.
    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.data.len()
    }

    #[inline]
    pub(crate) fn uv(&mut self) -> Result<u64, Malformed> {
        let mut result = 0u64;
        let mut shift = 0u32;
        loop {
            let Some(&byte) = self.data.get(self.pos) else { return Err(Malformed) };
            self.pos += 1;
            if shift == 63 && byte > 1 {
                return Err(Malformed);
            }
            result |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(result);
            }
            shift += 7;
            if shift > 63 {
                return Err(Malformed);
            }
        }
    }

    #[inline]
    pub(crate) fn sv(&mut self) -> Result<i64, Malformed> {
        let v = self.uv()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8, Malformed> {
        let Some(&byte) = self.data.get(self.pos) else { return Err(Malformed) };
        self.pos += 1;
        Ok(byte)
    }

    pub(crate) fn bytes(&mut self, len: usize) -> Result<&'a [u8], Malformed> {
        let end = self.pos.checked_add(len).filter(|&e| e <= self.data.len()).ok_or(Malformed)?;
        let slice = &self.data[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    /// A count that must be plausible for the bytes left (each item takes at least `min_bytes`).
    pub(crate) fn count(&mut self, min_bytes: usize) -> Result<usize, Malformed> {
        let n = self.uv()?;
        let left = (self.data.len() - self.pos) as u64;
        if n.saturating_mul(min_bytes as u64) > left {
            return Err(Malformed);
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        let values = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX];
        let signed = [0i64, 1, -1, 63, -64, 64, i64::MAX, i64::MIN];
        let mut out = Vec::new();
        for v in values {
            put_uv(&mut out, v);
        }
        for v in signed {
            put_sv(&mut out, v);
        }
        let mut cursor = Cursor::new(&out);
        for v in values {
            assert_eq!(cursor.uv().unwrap(), v);
        }
        for v in signed {
            assert_eq!(cursor.sv().unwrap(), v);
        }
        assert!(cursor.at_end());
        assert!(cursor.uv().is_err());
        // Eleven continuation bytes are not a varint.
        assert!(Cursor::new(&[0xff; 11]).uv().is_err());
    }
}

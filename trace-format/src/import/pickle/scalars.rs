//! The opcodes that push a scalar (None, booleans, integers, floats, strings, bytes), in the
//! binary protocols and the text ones (0 and 1), and the decoding of their arguments.

use super::opcodes::{
    BINBYTES, BINBYTES8, BINFLOAT, BININT, BININT1, BININT2, BINSTRING, BINUNICODE, BINUNICODE8, BYTEARRAY8, FLOAT,
    INT, LONG, LONG1, LONG4, NEWFALSE, NEWTRUE, NONE, SHORT_BINBYTES, SHORT_BINSTRING, SHORT_BINUNICODE, STRING,
    UNICODE,
};
use super::{Machine, PieceSink, Value};
use crate::error::Result;

impl<S: PieceSink> Machine<'_, S> {
    fn string(&mut self, bytes_len: usize) -> Result<Value> {
        let bytes = self.cur.take(bytes_len)?;
        // Python writes lone surrogates with 'surrogatepass', which is not valid UTF-8.
        let id = match self.store.interner.string_from_utf8(bytes) {
            Some(id) => id,
            None => {
                let text = String::from_utf8_lossy(bytes).into_owned();
                self.store.interner.string(&text)
            }
        };
        Ok(Value::Str(id))
    }

    fn parse_text_int(&self, text: &[u8]) -> Result<Value> {
        let text = std::str::from_utf8(text).map_err(|_| self.err("an integer argument is not text"))?;
        let text = text.trim().trim_end_matches('L');
        match text {
            "00" => return Ok(Value::Bool(false)),
            "01" => return Ok(Value::Bool(true)),
            _ => {}
        }
        if let Ok(v) = text.parse::<i64>() {
            return Ok(Value::Int(v));
        }
        if let Ok(v) = text.parse::<u64>() {
            return Ok(Value::UInt(v));
        }
        if !text.is_empty() && text.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Value::BigInt);
        }
        Err(self.err(format!("{text:?} is not an integer")))
    }

    /// The opcodes that push a number, a string or bytes.
    #[inline]
    pub(super) fn scalar(&mut self, op: u8) -> Result<()> {
        match op {
            NONE => self.push(Value::None),
            NEWTRUE => self.push(Value::Bool(true)),
            NEWFALSE => self.push(Value::Bool(false)),
            BININT => {
                let v = self.cur.u32()? as i32;
                self.push(Value::Int(i64::from(v)));
            }
            BININT1 => {
                let v = self.cur.u8()?;
                self.push(Value::Int(i64::from(v)));
            }
            BININT2 => {
                let v = self.cur.u16()?;
                self.push(Value::Int(i64::from(v)));
            }
            LONG1 => {
                let n = self.cur.u8()? as usize;
                let v = long_from_le(self.cur.take(n)?);
                self.push(v);
            }
            LONG4 => {
                let n = self.cur.u32()? as u64;
                let n = self.cur.len_arg(n)?;
                let v = long_from_le(self.cur.take(n)?);
                self.push(v);
            }
            INT | LONG => {
                let line = self.cur.line()?;
                let v = self.parse_text_int(line)?;
                self.push(v);
            }
            BINFLOAT => {
                let v = f64::from_bits(u64::from_be_bytes({
                    let b = self.cur.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    a
                }));
                self.push(Value::Float(v));
            }
            FLOAT => {
                let line = self.cur.line()?;
                let text = String::from_utf8_lossy(line).trim().to_owned();
                let v = text.parse::<f64>().map_err(|_| self.err(format!("{text:?} is not a float")))?;
                self.push(Value::Float(v));
            }
            SHORT_BINUNICODE => {
                let n = self.cur.u8()? as usize;
                let v = self.string(n)?;
                self.push(v);
            }
            BINUNICODE => {
                let n = self.cur.u32()? as u64;
                let n = self.cur.len_arg(n)?;
                let v = self.string(n)?;
                self.push(v);
            }
            BINUNICODE8 => {
                let n = self.cur.u64()?;
                let n = self.cur.len_arg(n)?;
                let v = self.string(n)?;
                self.push(v);
            }
            UNICODE => {
                // Protocol 0 text: raw-unicode-escape. Kept simple: \uXXXX escapes decoded.
                let text = decode_raw_unicode_escape(self.cur.line()?);
                let id = self.store.interner.string(&text);
                self.push(Value::Str(id));
            }
            STRING => {
                let text = String::from_utf8_lossy(self.cur.line()?);
                let text = text.trim();
                let unquoted = text
                    .strip_prefix('\'')
                    .and_then(|t| t.strip_suffix('\''))
                    .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
                    .ok_or_else(|| self.err("STRING argument is not quoted"))?;
                let id = self.store.interner.string(unquoted);
                self.push(Value::Str(id));
            }
            BINSTRING => {
                let n = self.cur.u32()? as u64;
                let n = self.cur.len_arg(n)?;
                let v = self.string(n)?;
                self.push(v);
            }
            SHORT_BINSTRING => {
                let n = self.cur.u8()? as usize;
                let v = self.string(n)?;
                self.push(v);
            }
            BINBYTES | SHORT_BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                let n = match op {
                    BINBYTES => u64::from(self.cur.u32()?),
                    SHORT_BINBYTES => u64::from(self.cur.u8()?),
                    _ => self.cur.u64()?,
                };
                let n = self.cur.len_arg(n)?;
                self.cur.take(n)?;
                self.push(Value::Bytes(n as u64));
            }
            _ => return Err(self.err(format!("internal: opcode 0x{op:02x} dispatched to the wrong group"))),
        }
        Ok(())
    }
}

/// A little-endian two's-complement integer of any width, as `LONG1`/`LONG4` store it.
pub(super) fn long_from_le(bytes: &[u8]) -> Value {
    match bytes.len() {
        0 => Value::Int(0),
        n @ 1..=8 => {
            // Assembled in a register: a variable-length copy into a stack array stalls the load
            // that reads it back.
            let mut v = 0u64;
            for (i, &b) in bytes.iter().enumerate() {
                v |= u64::from(b) << (8 * i);
            }
            let shift = 64 - 8 * n as u32;
            Value::Int(((v << shift) as i64) >> shift)
        }
        _ => {
            // Two's complement wider than 8 bytes: fits u64 only when the rest is zero padding.
            let (low, high) = bytes.split_at(8);
            if high.iter().all(|&b| b == 0) {
                let mut a = [0u8; 8];
                a.copy_from_slice(low);
                let v = u64::from_le_bytes(a);
                if v <= i64::MAX as u64 { Value::Int(v as i64) } else { Value::UInt(v) }
            } else if high.iter().all(|&b| b == 0xff) && low[7] & 0x80 != 0 {
                let mut a = [0u8; 8];
                a.copy_from_slice(low);
                Value::Int(i64::from_le_bytes(a))
            } else {
                Value::BigInt
            }
        }
    }
}

fn decode_raw_unicode_escape(bytes: &[u8]) -> String {
    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && matches!(chars.peek(), Some('u') | Some('U')) {
            let width = if chars.next() == Some('u') { 4 } else { 8 };
            let hex: String = chars.by_ref().take(width).collect();
            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                Some(decoded) => out.push(decoded),
                None => {
                    out.push('\\');
                    out.push_str(&hex);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long1_integers_of_every_width() {
        let cases: [(&[u8], Value); 8] = [
            (&[], Value::Int(0)),
            (&[0x7f], Value::Int(127)),
            (&[0x80], Value::Int(-128)),
            (&[0xff, 0x00], Value::Int(255)),
            (&[0x00, 0x80], Value::Int(-32768)),
            (&[0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00], Value::Int(0x8000_0000_0000)),
            (&[0xff; 8], Value::Int(-1)),
            (&[0, 0, 0, 0, 0, 0, 0, 0x80, 0], Value::UInt(1 << 63)),
        ];
        for (bytes, expected) in cases {
            assert_eq!(long_from_le(bytes), expected, "{bytes:?}");
        }
        assert_eq!(long_from_le(&[1, 0, 0, 0, 0, 0, 0, 0, 1]), Value::BigInt);
        assert_eq!(long_from_le(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]), Value::Int(i64::MIN));
    }
}

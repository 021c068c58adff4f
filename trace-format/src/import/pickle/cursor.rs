//! The pickle machine's place in the file: the bytes, where the next read starts, where the
//! opcode being run began (errors name that offset), and the reads an opcode's argument takes,
//! each refusing to run past the end.

use crate::error::{Error, Result};

/// A read position in a pickle's bytes.
pub(super) struct Cursor<'a> {
    /// The whole pickle.
    pub(super) data: &'a [u8],
    /// Where the next read starts.
    pub(super) pos: usize,
    /// Where the opcode being run began.
    pub(super) op_pos: usize,
}

impl<'a> Cursor<'a> {
    /// At the start of `data`.
    pub(super) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0, op_pos: 0 }
    }

    /// An error at the opcode being run.
    pub(super) fn err(&self, message: impl Into<String>) -> Error {
        Error::Pickle { offset: self.op_pos as u64, message: message.into() }
    }

    /// The next `n` bytes.
    #[inline]
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.data.len());
        let Some(end) = end else {
            return Err(
                self.err(format!("the file ends in the middle of an opcode that needs {n} more bytes (truncated?)"))
            );
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next byte.
    #[inline]
    pub(super) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// The next 2 bytes, little-endian.
    pub(super) fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// The next 4 bytes, little-endian.
    pub(super) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next 8 bytes, little-endian.
    pub(super) fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length argument, refused when more bytes than are left.
    pub(super) fn len_arg(&mut self, len: u64) -> Result<usize> {
        let remaining = (self.data.len() - self.pos) as u64;
        if len > remaining {
            return Err(self.err(format!(
                "a length of {len} bytes runs past the end of the file ({remaining} bytes left; truncated or corrupt)"
            )));
        }
        Ok(len as usize)
    }

    /// The text up to the next newline (which is passed).
    pub(super) fn line(&mut self) -> Result<&'a [u8]> {
        let rest = &self.data[self.pos..];
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            return Err(self.err("the file ends inside a text argument (truncated?)"));
        };
        self.pos += newline + 1;
        Ok(&rest[..newline])
    }
}

//! The pickle opcodes, named once (the names are Python's, as `pickletools` lists them). The
//! machine in `mod.rs`, its fast paths, the opcode walker and the parallel reader match on these.
//! Opcodes marked refused would run code in Python; the reader stops at them.

/// Push a mark on the stack.
pub const MARK: u8 = b'(';
/// End of the pickle.
pub const STOP: u8 = b'.';
/// Drop the top of the stack.
pub const POP: u8 = b'0';
/// Push the top of the stack again.
pub const DUP: u8 = b'2';
/// Drop everything down to the last mark.
pub const POP_MARK: u8 = b'1';
/// A float as text, to the newline.
pub const FLOAT: u8 = b'F';
/// An int as text, to the newline.
pub const INT: u8 = b'I';
/// A 4-byte signed int.
pub const BININT: u8 = b'J';
/// A 1-byte unsigned int.
pub const BININT1: u8 = b'K';
/// A long as text, to the newline.
pub const LONG: u8 = b'L';
/// A 2-byte unsigned int.
pub const BININT2: u8 = b'M';
/// None.
pub const NONE: u8 = b'N';
/// A persistent id as text (runs code: refused).
pub const PERSID: u8 = b'P';
/// A persistent id from the stack (runs code: refused).
pub const BINPERSID: u8 = b'Q';
/// Call a callable (runs code: refused).
pub const REDUCE: u8 = b'R';
/// A quoted byte string as text.
pub const STRING: u8 = b'S';
/// A byte string, 4-byte length.
pub const BINSTRING: u8 = b'T';
/// A byte string, 1-byte length.
pub const SHORT_BINSTRING: u8 = b'U';
/// A raw-unicode-escaped string, to the newline.
pub const UNICODE: u8 = b'V';
/// A UTF-8 string, 4-byte length.
pub const BINUNICODE: u8 = b'X';
/// Append the top of the stack to the list under it.
pub const APPEND: u8 = b'a';
/// Set an object's state (runs code: refused).
pub const BUILD: u8 = b'b';
/// Push a module attribute (runs code: refused).
pub const GLOBAL: u8 = b'c';
/// A dict of the items down to the mark.
pub const DICT: u8 = b'd';
/// An empty dict.
pub const EMPTY_DICT: u8 = b'}';
/// Append the items down to the mark to the list under them.
pub const APPENDS: u8 = b'e';
/// Push a memo entry, index as text.
pub const GET: u8 = b'g';
/// Push a memo entry, 1-byte index.
pub const BINGET: u8 = b'h';
/// Build an instance (runs code: refused).
pub const INST: u8 = b'i';
/// Push a memo entry, 4-byte index.
pub const LONG_BINGET: u8 = b'j';
/// A list of the items down to the mark.
pub const LIST: u8 = b'l';
/// An empty list.
pub const EMPTY_LIST: u8 = b']';
/// Build an object (runs code: refused).
pub const OBJ: u8 = b'o';
/// Store the top of the stack in the memo, index as text.
pub const PUT: u8 = b'p';
/// Store the top of the stack in the memo, 1-byte index.
pub const BINPUT: u8 = b'q';
/// Store the top of the stack in the memo, 4-byte index.
pub const LONG_BINPUT: u8 = b'r';
/// Set one key and value in the dict under them.
pub const SETITEM: u8 = b's';
/// A tuple of the items down to the mark.
pub const TUPLE: u8 = b't';
/// An empty tuple.
pub const EMPTY_TUPLE: u8 = b')';
/// Set the keys and values down to the mark in the dict under them.
pub const SETITEMS: u8 = b'u';
/// An 8-byte big-endian float.
pub const BINFLOAT: u8 = b'G';
/// Bytes, 4-byte length.
pub const BINBYTES: u8 = b'B';
/// Bytes, 1-byte length.
pub const SHORT_BINBYTES: u8 = b'C';
/// The protocol version (protocol 2 on).
pub const PROTO: u8 = 0x80;
/// Build an object (runs code: refused).
pub const NEWOBJ: u8 = 0x81;
/// An extension-registry object (runs code: refused).
pub const EXT1: u8 = 0x82;
/// An extension-registry object (runs code: refused).
pub const EXT2: u8 = 0x83;
/// An extension-registry object (runs code: refused).
pub const EXT4: u8 = 0x84;
/// A tuple of the top item.
pub const TUPLE1: u8 = 0x85;
/// A tuple of the top two items.
pub const TUPLE2: u8 = 0x86;
/// A tuple of the top three items.
pub const TUPLE3: u8 = 0x87;
/// True.
pub const NEWTRUE: u8 = 0x88;
/// False.
pub const NEWFALSE: u8 = 0x89;
/// A little-endian long, 1-byte length.
pub const LONG1: u8 = 0x8a;
/// A little-endian long, 4-byte length.
pub const LONG4: u8 = 0x8b;
/// A UTF-8 string, 1-byte length (protocol 4 on).
pub const SHORT_BINUNICODE: u8 = 0x8c;
/// A UTF-8 string, 8-byte length.
pub const BINUNICODE8: u8 = 0x8d;
/// Bytes, 8-byte length.
pub const BINBYTES8: u8 = 0x8e;
/// An empty set.
pub const EMPTY_SET: u8 = 0x8f;
/// Add the items down to the mark to the set under them.
pub const ADDITEMS: u8 = 0x90;
/// A frozenset of the items down to the mark.
pub const FROZENSET: u8 = 0x91;
/// Build an object (runs code: refused).
pub const NEWOBJ_EX: u8 = 0x92;
/// Push a module attribute named on the stack (runs code: refused).
pub const STACK_GLOBAL: u8 = 0x93;
/// Store the top of the stack at the memo's next index.
pub const MEMOIZE: u8 = 0x94;
/// The length of the frame that follows (protocol 4 on).
pub const FRAME: u8 = 0x95;
/// A bytearray, 8-byte length.
pub const BYTEARRAY8: u8 = 0x96;
/// An out-of-band buffer (refused).
pub const NEXT_BUFFER: u8 = 0x97;
/// Make the top buffer read-only (refused).
pub const READONLY_BUFFER: u8 = 0x98;

/// The name of an opcode that would run code (or reach outside the pickle), for the error that
/// refuses it; `unknown` for any other byte.
pub fn refused_name(op: u8) -> &'static str {
    match op {
        GLOBAL => "GLOBAL",
        STACK_GLOBAL => "STACK_GLOBAL",
        REDUCE => "REDUCE",
        BUILD => "BUILD",
        INST => "INST",
        OBJ => "OBJ",
        NEWOBJ => "NEWOBJ",
        NEWOBJ_EX => "NEWOBJ_EX",
        EXT1 => "EXT1",
        EXT2 => "EXT2",
        EXT4 => "EXT4",
        PERSID => "PERSID",
        BINPERSID => "BINPERSID",
        NEXT_BUFFER => "NEXT_BUFFER",
        READONLY_BUFFER => "READONLY_BUFFER",
        _ => "unknown",
    }
}

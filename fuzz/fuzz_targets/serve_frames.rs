//! What a peer sends `vramscope serve` or a viewer over the network: any bytes must be read as
//! frames or refused, never panic or allocate past the frame limit, and a frame read must write
//! back to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_wire::serve::Frame;

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    // As many frames as the bytes hold, as a connection reads them.
    while let Ok(frame) = Frame::read(&mut input) {
        let mut written = Vec::new();
        if frame.write(&mut written).is_ok() {
            let again = Frame::read(&mut written.as_slice());
            assert_eq!(again.ok().as_ref(), Some(&frame));
        }
    }
});

//! Fuzzes the jdl reader: no input may panic, and whatever it accepts must be
//! written back as jdl that reads again.
#![no_main]

use brokk_jdl::{read, write, Format, ReadOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(parsed) = read(Format::Jdl, text, &ReadOptions::default()) {
        if let Ok(written) = write(Format::Jdl, &parsed.jobs) {
            if let Err(e) = read(Format::Jdl, &written.text, &ReadOptions::default()) {
                panic!("own output does not read back: {e}\n{}", written.text);
            }
        }
    }
});

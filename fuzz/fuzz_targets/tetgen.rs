#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lively_fuzz::tetgen(data);
});

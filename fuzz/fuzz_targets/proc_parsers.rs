//! The parsers of /proc and /sys files (host input, but a broken or hostile host must not
//! crash a hook that runs at every container start).
#![no_main]
use libfuzzer_sys::fuzz_target;
use stackhook::probe::parse;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse::nvrm_version(&text);
    let _ = parse::modules(&text);
    let _ = parse::char_devices(&text);
    let _ = parse::key_values(&text);
    let _ = parse::hex_u32(&text);
    let _ = parse::bus_id(&text);
    let _ = parse::so_version(&text, "libcuda.so");
    for line in text.lines().take(64) {
        let _ = line.parse::<stackhook::contract::version::KernelRelease>();
        let _ = line.parse::<stackhook::contract::version::DriverVersion>();
    }
});

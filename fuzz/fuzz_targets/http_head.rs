//! Request heads fed as arbitrary bytes, split at an arbitrary point: parsing the prefix must
//! never panic, and a head parsed from the whole input must parse identically from a longer one.
#![no_main]
use iac_agui::server::http::parse_head;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().copied().unwrap_or(0) as usize % (data.len() + 1);
    let _ = parse_head(&data[..split]);
    if let Ok(Some((head, used))) = parse_head(data) {
        assert!(used <= data.len());
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let again = parse_head(&longer).ok().flatten();
        assert_eq!(again.map(|(h, u)| (h, u)), Some((head, used)));
    }
});

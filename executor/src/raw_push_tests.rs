use super::*;

#[test]
fn advertised_addresses_give_their_host_and_port() {
    assert_eq!(
        host_port("http://127.0.0.1:7078").unwrap(),
        ("127.0.0.1".to_string(), 7078)
    );
    assert_eq!(host_port("http://[::1]:9").unwrap(), ("::1".to_string(), 9));
    assert_eq!(
        host_port("http://executor-3:7078").unwrap(),
        ("executor-3".to_string(), 7078)
    );
    for bad in [
        "127.0.0.1:7078",
        "http://host",
        "https://host:1",
        "",
        "http://:1",
    ] {
        let e = host_port(bad).unwrap_err();
        assert!(e.contains("invalid shuffle address"), "{bad}: {e}");
    }
}

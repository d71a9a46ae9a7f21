//! What the receive low-water mark of the HTTP/2 driver (`sluice_tune::recv_mark`) relies on
//! in the kernel, checked on a real loopback socket.

use std::time::Duration;

/// What the mark relies on in the kernel: input under the mark does not wake the reader,
/// a read still returns it, and lowering the mark wakes a reader that waits.
#[tokio::test]
async fn the_kernel_wakes_the_reader_at_the_mark_and_when_it_is_lowered() {
    use std::os::fd::AsRawFd;
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let fd = server.as_raw_fd();
    sluice_sys::sock::set_rcvlowat(fd, 64 * 1024).unwrap();
    // tokio takes a new socket for readable until a read finds nothing.
    let mut buf = [0u8; 1000];
    assert!(server.try_read(&mut buf).is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock));
    client.write_all(&[7; 100]).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(200), server.readable()).await;
    assert!(waited.is_err(), "100 bytes under a 64 KiB mark woke the reader: {waited:?}");
    assert_eq!(server.try_read(&mut buf).ok(), None, "no readiness, no read (tokio)");
    // Lowered: the kernel checks what is queued at once.
    let wait = tokio::spawn(async move {
        server.readable().await.unwrap();
        let mut buf = [0u8; 1000];
        server.try_read(&mut buf).unwrap()
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    sluice_sys::sock::set_rcvlowat(fd, 1).unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), wait).await.expect("lowering the mark woke no one");
    assert_eq!(n.unwrap(), 100, "a read returns what is queued");
}

//! In-process kcpio peers for the integration tests: an echo server, a sink
//! that counts and verifies, and a client that sends the payload pattern and
//! verifies what comes back.

use std::net::SocketAddr;
use std::time::Duration;

use kcpio::{Config, KcpListener, KcpStream, OwnedReadHalf, SessionStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use super::pattern;

/// Binds a kcpio `what` server on `127.0.0.1:0` and runs `session` on every
/// stream it accepts. The sessions live in a `JoinSet` owned by the returned
/// accept task: aborting the task drops the set, which aborts the sessions.
async fn serve<F, Fut>(config: &Config, what: &str, session: F) -> (SocketAddr, JoinHandle<()>)
where
    F: Fn(KcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = KcpListener::bind("127.0.0.1:0", config)
        .await
        .unwrap_or_else(|e| panic!("bind the kcpio {what} server: {e:?}"));
    let addr = listener.local_addr().expect("local_addr");
    let task = tokio::spawn(async move {
        let mut sessions = tokio::task::JoinSet::new();
        while let Ok((stream, _peer)) = listener.accept().await {
            sessions.spawn(session(stream));
        }
    });
    (addr, task)
}

/// A kcpio echo server on `127.0.0.1:0`: every accepted session writes back
/// every byte it reads. Dropping it stops the accept loop and every session.
pub struct EchoServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl EchoServer {
    /// Binds and starts accepting.
    pub async fn start(config: &Config) -> EchoServer {
        let (addr, task) = serve(config, "echo", |stream| async move {
            let (mut r, mut w) = stream.into_split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        })
        .await;
        EchoServer { addr, task }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts the sessions.
        self.task.abort();
    }
}

/// Connects to `addr`, sends `bytes` of the payload pattern in `chunk`-sized
/// writes while reading the echo back, and verifies every byte. Returns the
/// stream (for its stats) or a description of the failure.
pub async fn echo_client(
    addr: SocketAddr,
    config: &Config,
    bytes: u64,
    chunk: usize,
    timeout: Duration,
) -> Result<SessionStats, String> {
    pattern_client(addr, config, bytes, chunk, timeout, async move |mut r| {
        let mut verifier = pattern::Verifier::default();
        let mut buf = vec![0u8; 64 * 1024];
        while verifier.offset < bytes {
            let n = r
                .read(&mut buf)
                .await
                .map_err(|e| format!("read at {}: {e}", verifier.offset))?;
            if n == 0 {
                return Err(format!("EOF after {} bytes", verifier.offset));
            }
            if !verifier.push(&buf[..n]) {
                return Err(format!("echo mismatch at offset {:?}", verifier.mismatch));
            }
        }
        if verifier.offset != bytes {
            return Err(format!(
                "echo returned {} bytes, sent {bytes}",
                verifier.offset
            ));
        }
        Ok(r)
    })
    .await
}

/// Connects to a sink-server (Go or Rust) at `addr`, sends `bytes` of the
/// pattern and waits for a progress report that reaches `bytes` with the
/// mismatch bit clear.
pub async fn sink_client(
    addr: SocketAddr,
    config: &Config,
    bytes: u64,
    timeout: Duration,
) -> Result<SessionStats, String> {
    pattern_client(
        addr,
        config,
        bytes,
        32 * 1024,
        timeout,
        async move |mut r| {
            let mut report = [0u8; 8];
            loop {
                r.read_exact(&mut report)
                    .await
                    .map_err(|e| format!("waiting for a sink report: {e}"))?;
                let v = u64::from_le_bytes(report);
                if v & (1 << 63) != 0 {
                    return Err(format!(
                        "sink saw a mismatch (after {} bytes)",
                        v & !(1 << 63)
                    ));
                }
                if v > bytes {
                    return Err(format!("the sink counted {v} bytes, {bytes} were sent"));
                }
                if v == bytes {
                    break;
                }
            }
            Ok(r)
        },
    )
    .await
}

/// What both clients share, all within `timeout`: connect, write `bytes` of
/// the pattern in `chunk`-sized writes from a task, let `read` check the
/// answers on the read half, then wait for the writer. Returns the session's
/// stats or a description of the failure.
async fn pattern_client<F>(
    addr: SocketAddr,
    config: &Config,
    bytes: u64,
    chunk: usize,
    timeout: Duration,
    read: F,
) -> Result<SessionStats, String>
where
    F: AsyncFnOnce(OwnedReadHalf) -> Result<OwnedReadHalf, String>,
{
    let work = async {
        let stream = KcpStream::connect(addr, config)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (r, mut w) = stream.into_split();
        let writer = tokio::spawn(async move {
            let mut buf = vec![0u8; chunk];
            let mut off = 0u64;
            while off < bytes {
                let n = (bytes - off).min(chunk as u64) as usize;
                pattern::fill(&mut buf[..n], off);
                w.write_all(&buf[..n])
                    .await
                    .map_err(|e| format!("write at {off}: {e}"))?;
                off += n as u64;
            }
            Ok::<_, String>(w)
        });
        let r = read(r).await?;
        let _w = writer.await.map_err(|e| e.to_string())??;
        Ok(r.stats())
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("timed out after {timeout:?}"))?
}

/// A kcpio sink server on `127.0.0.1:0`, with the Go sink-server's protocol:
/// each session's input is checked against the pattern and answered with
/// 8-byte little-endian progress reports (bit 63 set after a mismatch),
/// after every 64 KiB and whenever input pauses for 20 ms.
pub struct SinkServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl SinkServer {
    /// Binds and starts accepting.
    pub async fn start(config: &Config) -> SinkServer {
        let (addr, task) = serve(config, "sink", |mut stream| async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut v = pattern::Verifier::default();
            let mut reported = 0u64;
            loop {
                let read =
                    tokio::time::timeout(Duration::from_millis(20), stream.read(&mut buf)).await;
                let pause = match read {
                    Ok(Ok(0)) | Ok(Err(_)) => return,
                    Ok(Ok(n)) => {
                        v.push(&buf[..n]);
                        false
                    }
                    Err(_) => true,
                };
                if v.offset - reported >= 64 * 1024 || (pause && v.offset != reported) {
                    let mut r = v.offset;
                    if v.mismatch.is_some() {
                        r |= 1 << 63;
                    }
                    if stream.write_all(&r.to_le_bytes()).await.is_err() {
                        return;
                    }
                    reported = v.offset;
                }
            }
        })
        .await;
        SinkServer { addr, task }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SinkServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

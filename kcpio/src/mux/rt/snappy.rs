//! [`Snappy`]: kcptun's compression layer as an `AsyncRead + AsyncWrite`
//! wrapper.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::mux::snappy::{Decoder, Encoder, MAX_ENCODED_CHUNK};

/// Bytes read from the inner stream per call.
const READ_BUF: usize = 64 * 1024;

/// The snappy framing format over a byte stream, as kcptun's `compStream`
/// (`--nocomp` off) uses it: one framed stream per direction.
///
/// Every `poll_write` encodes up to 64 KiB of its buffer as one chunk, so
/// the output is byte-identical to Go's `snappy.NewBufferedWriter` with a
/// `Flush` after each `Write`; it returns only once the chunk is encoded and
/// owned by the wrapper (the previous chunk must have reached the inner
/// stream first), and `poll_flush` drains it. Reading accepts whatever Go's
/// `snappy.Reader` accepts. Short reads and writes of the inner stream are
/// handled; memory is fixed (about 280 KiB).
///
/// Put it under a [`Mux`](super::Mux) to talk to kcptun without `--nocomp`:
/// `Mux::client(Snappy::new(kcp_stream), &config)`.
pub struct Snappy<T> {
    inner: T,
    encoder: Encoder,
    wbuf: Box<[u8]>,
    wpos: usize,
    wlen: usize,
    decoder: Decoder,
    rbuf: Box<[u8]>,
    rpos: usize,
    rlen: usize,
    eof: bool,
}

impl<T> Snappy<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            encoder: Encoder::new(),
            wbuf: vec![0; MAX_ENCODED_CHUNK].into_boxed_slice(),
            wpos: 0,
            wlen: 0,
            decoder: Decoder::new(),
            rbuf: vec![0; READ_BUF].into_boxed_slice(),
            rpos: 0,
            rlen: 0,
            eof: false,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The wrapped stream, mutably (bytes written to it directly corrupt
    /// the framing).
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// The wrapped stream; encoded bytes not yet written are lost.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Snappy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snappy")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<T: AsyncWrite + Unpin> Snappy<T> {
    /// Writes the pending chunk out; Ready(Ok) once it is all written.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.wpos < self.wlen {
            match Pin::new(&mut self.inner).poll_write(cx, &self.wbuf[self.wpos..self.wlen]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.wpos += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Snappy<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let d = this.decoder.decoded();
            if !d.is_empty() {
                let n = d.len().min(buf.remaining());
                buf.put_slice(&d[..n]);
                this.decoder.consume(n);
                return Poll::Ready(Ok(()));
            }
            if this.rpos < this.rlen {
                let n = this
                    .decoder
                    .push(&this.rbuf[this.rpos..this.rlen])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                this.rpos += n;
                continue;
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut this.rbuf);
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                if this.decoder.mid_chunk() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "snappy: stream ends inside a chunk",
                    )));
                }
                this.eof = true;
                return Poll::Ready(Ok(()));
            }
            this.rpos = 0;
            this.rlen = n;
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Snappy<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        std::task::ready!(this.poll_drain(cx))?;
        let (taken, written) = this.encoder.encode(buf, &mut this.wbuf);
        this.wpos = 0;
        this.wlen = written;
        // Start sending now; what the inner stream does not take yet goes
        // out on the next write or flush. An error here is the inner
        // stream's and shows again on the next call.
        let _ = this.poll_drain(cx);
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

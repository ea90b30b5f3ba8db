//! [`KcpSocket`]: a client's UDP socket before it connects, used like
//! `tokio::net::TcpSocket` (bind first, or bring your own socket).

use std::fmt;
use std::io;
use std::net::SocketAddr;

use crate::config::{Config, DEFAULT_RECV_BUFFER};
use crate::driver::io as dio;
use crate::stream::KcpStream;

/// A UDP socket that becomes one [`KcpStream`] when it
/// [`connect`](Self::connect)s, like `tokio::net::TcpSocket`: bind it to a
/// chosen local address first, or wrap a socket you made yourself.
///
/// [`KcpStream::connect`] is the short form (a new socket on the
/// unspecified address of the peer's family, port 0, every resolved address
/// tried in turn).
///
/// # Ownership
///
/// The constructors take the socket by value: the stream owns it, and it is
/// closed when the stream (both halves) and its background flush are done.
/// To keep using a socket of your own, pass a duplicate
/// (`socket.try_clone()?`): the stream then closes only its duplicate and
/// your descriptor stays open. The two share one kernel socket, so what the
/// stream sets is visible on yours: it is connected to the peer, made
/// non-blocking, given the configuration's buffer sizes and DSCP, and UDP
/// GRO is turned on where the kernel has it. Do not read from your copy
/// while the stream runs: datagrams would go to whichever reads first.
///
/// # Examples
///
/// ```no_run
/// use kcpio::{Config, KcpSocket};
///
/// # async fn run() -> std::io::Result<()> {
/// let config = Config::builder().build().unwrap();
/// let socket = KcpSocket::bind("127.0.0.1:0".parse().unwrap(), &config)?;
/// let stream = socket.connect("127.0.0.1:29900".parse().unwrap()).await?;
/// println!("from {}", stream.local_addr()?);
/// # Ok(()) }
/// ```
pub struct KcpSocket {
    socket: socket2::Socket,
    config: Config,
    /// Bound to port 0 by [`bind`](Self::bind): the port is the kernel's
    /// pick, which a fake-TCP connect does not carry over to TCP.
    any_port: bool,
}

impl fmt::Debug for KcpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KcpSocket")
            .field("local_addr", &self.local_addr().ok())
            .finish_non_exhaustive()
    }
}

impl KcpSocket {
    /// A new UDP socket bound to `addr` (port 0 picks one), with `config`'s
    /// socket options (buffer sizes, DSCP).
    ///
    /// # Errors
    ///
    /// Socket errors: `AddrInUse`, `AddrNotAvailable` for an address this
    /// host does not have, buffer sizes, DSCP.
    pub fn bind(addr: SocketAddr, config: &Config) -> io::Result<KcpSocket> {
        Ok(Self {
            socket: dio::bind_socket(addr, &config.inner, false, DEFAULT_RECV_BUFFER)?,
            config: config.clone(),
            any_port: addr.port() == 0,
        })
    }

    /// Wraps a bound `std::net::UdpSocket` (unbound sockets are bound to the
    /// unspecified address by the kernel when they connect). See the
    /// ownership rule on [`KcpSocket`]; `config`'s socket options are
    /// applied to it.
    ///
    /// # Errors
    ///
    /// Errors setting the socket options.
    pub fn from_std(socket: std::net::UdpSocket, config: &Config) -> io::Result<KcpSocket> {
        let socket = socket2::Socket::from(socket);
        let ipv4 = socket.local_addr()?.is_ipv4();
        dio::configure_socket(&socket, ipv4, &config.inner, DEFAULT_RECV_BUFFER)?;
        Ok(Self {
            socket,
            config: config.clone(),
            any_port: false,
        })
    }

    /// Wraps a `tokio::net::UdpSocket`; as [`from_std`](Self::from_std).
    ///
    /// # Errors
    ///
    /// As [`from_std`](Self::from_std).
    pub fn from_tokio(socket: tokio::net::UdpSocket, config: &Config) -> io::Result<KcpSocket> {
        Self::from_std(socket.into_std()?, config)
    }

    /// The socket's local address.
    ///
    /// # Errors
    ///
    /// The OS error, or `AddrNotAvailable` for a non-IP socket.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::AddrNotAvailable, "not an IP socket"))
    }

    /// Connects to `peer` and opens the session, as
    /// [`KcpStream::connect`] does for one address: the socket is connected
    /// (so an ICMP port unreachable reaches us), and with the connect probe
    /// on (the default) this returns once the peer answered. Must be called
    /// within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`KcpStream::connect`], for this one address.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the socket is consumed: a
    /// cancelled call closes it (the session it started is released).
    pub async fn connect(self, peer: SocketAddr) -> io::Result<KcpStream> {
        KcpStream::connect_socket(self.socket, peer, &self.config, self.any_port).await
    }
}

//! Fake TCP outside Linux: every way in fails with `Unsupported`.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use super::FakeTcpStats;
use crate::sys::{RecvMeta, Transmit, UdpState};

/// Never constructed outside Linux.
pub(crate) enum FakeTcp {}

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "fake TCP (Carrier::FakeTcp) is only available on Linux",
    )
}

impl FakeTcp {
    pub(crate) fn listen(_: SocketAddr, _: usize, _: u8, _: usize) -> io::Result<Vec<Self>> {
        Err(unsupported())
    }

    pub(crate) async fn connect(_: SocketAddr, _: SocketAddr, _: usize, _: u8) -> io::Result<Self> {
        Err(unsupported())
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        match *self {}
    }

    pub(crate) fn stats(&self) -> FakeTcpStats {
        match *self {}
    }

    pub(crate) fn recv(
        &self,
        _: &UdpState,
        _: &mut [IoSliceMut<'_>],
        _: &mut [RecvMeta],
    ) -> io::Result<usize> {
        match *self {}
    }

    pub(crate) fn send(&self, _: &UdpState, _: &[Transmit<'_>]) -> io::Result<usize> {
        match *self {}
    }
}

/// Never constructed outside Linux.
pub(crate) enum FakeTcpSocket {}

impl FakeTcpSocket {
    pub(crate) fn new(inner: FakeTcp) -> io::Result<Self> {
        match inner {}
    }

    pub(crate) fn get(&self) -> &FakeTcp {
        match *self {}
    }

    pub(crate) fn poll_recv(
        &self,
        _: &mut std::task::Context<'_>,
        _: &UdpState,
        _: &mut [IoSliceMut<'_>],
        _: &mut [RecvMeta],
    ) -> std::task::Poll<io::Result<usize>> {
        match *self {}
    }

    pub(crate) fn poll_send(
        &self,
        _: &mut std::task::Context<'_>,
        _: &UdpState,
        _: &[Transmit<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        match *self {}
    }
}

//! Batched datagram I/O; knows nothing of KCP.

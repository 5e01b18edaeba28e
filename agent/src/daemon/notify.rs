//! systemd's notification protocol (`sd_notify`): a datagram to `$NOTIFY_SOCKET`. Outside
//! systemd the variable is unset and every call is a no-op.

use std::{os::unix::net::UnixDatagram, time::Duration};

/// Where to send notifications, if systemd asked for them.
#[derive(Debug)]
pub struct Notifier {
    socket: Option<(UnixDatagram, String)>,
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET` (abstract sockets start with `@`).
    #[must_use]
    pub fn from_env() -> Self {
        let socket = std::env::var("NOTIFY_SOCKET").ok().and_then(|path| {
            let datagram = UnixDatagram::unbound().ok()?;
            Some((datagram, path))
        });
        Self { socket }
    }

    fn send(&self, message: &str) {
        let Some((datagram, path)) = &self.socket else {
            return;
        };
        let result = if let Some(name) = path.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt as _;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|address| datagram.send_to_addr(message.as_bytes(), &address))
        } else {
            datagram.send_to(message.as_bytes(), path)
        };
        if let Err(error) = result {
            tracing::warn!(%error, socket = %path, "sd_notify failed");
        }
    }

    /// `READY=1` plus a status line.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// `WATCHDOG=1`: the main loop is alive.
    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    /// A `STATUS=` line (shown by `systemctl status`).
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={status}"));
    }

    /// Half the watchdog interval systemd asked for (`$WATCHDOG_USEC`), if any.
    #[must_use]
    pub fn watchdog_interval() -> Option<Duration> {
        let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
        Some(Duration::from_micros(usec / 2).max(Duration::from_millis(100)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            socket: Some((UnixDatagram::unbound().unwrap(), path.display().to_string())),
        };
        notifier.ready("observing");
        let mut buffer = [0u8; 128];
        let n = listener.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1\nSTATUS=observing");
        notifier.stopping();
        let n = listener.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"STOPPING=1");
    }

    #[test]
    fn without_systemd_nothing_happens() {
        Notifier { socket: None }.ready("x");
    }
}

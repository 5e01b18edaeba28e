//! `[agent]`: the process itself, and the address syntax its `listen` key shares with the
//! command line.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// `[agent]`: the process itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// HTTP address for /metrics, /healthz, /readyz and /status. Loopback by default: the
    /// endpoints describe other processes' memory and are not meant for the network.
    /// `IP:PORT`, or `HOST:PORT` with a host name resolved at start (`localhost:9477`).
    #[serde(deserialize_with = "deserialize_address")]
    pub listen: SocketAddr,
    /// Run everything except migration; report what would have moved.
    pub observe: bool,
    /// `human` or `json` log lines on stderr.
    pub log_format: LogFormat,
    /// What to do when something else also manages placement (kernel NUMA balancing in
    /// tiering mode, a kdamond, numad, memtierd): `warn` and carry on, or `refuse` to start.
    pub on_conflict: CoexistMode,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9477)),
            observe: false,
            log_format: LogFormat::Human,
            on_conflict: CoexistMode::Warn,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// What to do about other page movers (`[agent] on_conflict`); the host's `exec::coexist`
/// finds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoexistMode {
    #[default]
    Warn,
    Refuse,
}

/// `IP:PORT`, or `HOST:PORT` with the host name resolved (its first address: `localhost` is
/// 127.0.0.1 where the system lists that first), for `listen` and the command line's
/// `--listen` and `--address`.
pub fn resolve_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs as _;
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    if text
        .rsplit_once(':')
        .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    {
        return Err(format!(
            "{text:?} is not an address: give IP:PORT or HOST:PORT (e.g. 127.0.0.1:9477, localhost:9477)"
        ));
    }
    match text.to_socket_addrs() {
        Ok(mut addresses) => addresses
            .next()
            .ok_or_else(|| format!("{text}: the host name has no address")),
        Err(error) => Err(format!("{text}: cannot resolve the host name: {error}")),
    }
}

fn deserialize_address<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    resolve_address(&text).map_err(serde::de::Error::custom)
}

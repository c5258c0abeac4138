//! The hosts a client's settings may make a node connect to: catalogs, object-store
//! endpoints and push targets. Left open, anyone who may register a table could point
//! the node at its own network (the cloud metadata service at 169.254.169.254, a
//! database beside it, a port scan timed by its answers), so addresses outside the
//! public internet are refused unless `network.allowed_hosts` lists them.
//! Must not reach: `catalog`, `delivery` (it judges hosts for them, knowing neither).
//!
//! Names are checked by resolving them; the clients icefeed builds itself (push
//! targets, REST catalogs) also connect only to the addresses the policy allows, so a
//! name that resolves differently at connect time gains nothing.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use url::Url;

/// How long a name's resolution may take before the check gives up on it (the client
/// that connects resolves it again, through the policy where icefeed builds it).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which non-public hosts and networks may be reached.
#[derive(Clone, Debug, Default)]
pub struct HostPolicy {
    inner: Arc<Allowed>,
}

#[derive(Debug, Default)]
struct Allowed {
    anything: bool,
    /// Host names, lower case, allowed whatever they resolve to.
    names: Vec<String>,
    nets: Vec<IpNet>,
}

/// A host the policy refuses.
#[derive(Debug, thiserror::Error)]
pub struct HostRefused {
    /// What the host was given for (`catalog uri`, `s3.endpoint`, `target.endpoints`).
    pub what: String,
    /// The URL (without credentials) or `host:port` as given.
    pub target: String,
    host: String,
    address: IpAddr,
}

impl std::fmt::Display for HostRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            what,
            target,
            host,
            address,
        } = self;
        write!(f, "{what} {target}: ")?;
        if host.parse::<IpAddr>().is_ok() {
            write!(f, "{address} is not a public address")?;
        } else {
            write!(
                f,
                "{host} resolves to {address}, which is not a public address"
            )?;
        }
        f.write_str(
            "; a node reaches hosts outside the public internet only when \
             network.allowed_hosts (ICEFEED_NETWORK__ALLOWED_HOSTS) lists them",
        )
    }
}

/// `url` as an error may show it: without user name and password.
pub fn without_credentials(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_password(None);
    let _ = shown.set_username("");
    shown.to_string()
}

impl HostPolicy {
    /// Every host: for tests and the benchmarks.
    pub fn unrestricted() -> Self {
        Self {
            inner: Arc::new(Allowed {
                anything: true,
                ..Allowed::default()
            }),
        }
    }

    /// Public addresses, and the host names, addresses and networks (CIDR) of `entries`.
    pub fn allowing(entries: &[String]) -> Result<Self, String> {
        let mut allowed = Allowed::default();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            if let Ok(net) = entry.parse::<IpNet>() {
                allowed.nets.push(net);
            } else if let Ok(ip) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
                allowed.nets.push(IpNet::from(ip));
            } else if is_host_name(entry) {
                allowed.names.push(entry.to_ascii_lowercase());
            } else {
                return Err(format!(
                    "network.allowed_hosts: {entry:?} is not a host name, an IP address or a \
                     network such as 10.0.0.0/8"
                ));
            }
        }
        Ok(Self {
            inner: Arc::new(allowed),
        })
    }

    /// Whether a connection to `ip` is allowed.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.inner.anything || is_public(ip) || self.inner.nets.iter().any(|n| n.contains(&ip))
    }

    fn allows_name(&self, host: &str) -> bool {
        self.inner.anything
            || self
                .inner
                .names
                .iter()
                .any(|n| n.eq_ignore_ascii_case(host))
    }

    /// Checks the host of `url`, given for `what`. A URL without a host, or one that
    /// does not parse, is left to the client, which fails on it its own way.
    pub async fn check_url(&self, what: &str, url: &str) -> Result<(), HostRefused> {
        let Ok(parsed) = Url::parse(url) else {
            return Ok(());
        };
        let Some(host) = parsed.host_str() else {
            return Ok(());
        };
        // The port does not change what a name resolves to.
        let port = parsed.port_or_known_default().unwrap_or(0);
        self.check_host(what, &without_credentials(&parsed), host, port)
            .await
    }

    /// Checks `host` (a name or an address) at `port`, given for `what` as `target`.
    pub async fn check_host(
        &self,
        what: &str,
        target: &str,
        host: &str,
        port: u16,
    ) -> Result<(), HostRefused> {
        let host = host.trim_matches(['[', ']']);
        if self.allows_name(host) {
            return Ok(());
        }
        let refused = |address| HostRefused {
            what: what.to_string(),
            target: target.to_string(),
            host: host.to_string(),
            address,
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.allows(ip).then_some(()).ok_or_else(|| refused(ip));
        }
        let resolved = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)));
        let Ok(Ok(addresses)) = resolved.await else {
            return Ok(());
        };
        for address in addresses {
            if !self.allows(address.ip()) {
                return Err(refused(address.ip()));
            }
        }
        Ok(())
    }

    /// Checks `url` when its host is an address, which a client connects to without
    /// resolving it; a name is left to [`HostPolicy::resolver`].
    pub fn check_address(&self, what: &str, url: &Url) -> Result<(), HostRefused> {
        let address = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        if self.allows(address) {
            return Ok(());
        }
        Err(HostRefused {
            what: what.to_string(),
            target: without_credentials(url),
            host: address.to_string(),
            address,
        })
    }

    /// A resolver for HTTP clients that keeps only the addresses this policy allows.
    fn resolver(&self) -> Arc<PolicyResolver> {
        Arc::new(PolicyResolver {
            policy: self.clone(),
        })
    }

    /// An HTTP client that connects only where this policy allows (for addresses given
    /// by name: check literal addresses with [`HostPolicy::check_url`]).
    pub fn http_client(&self) -> reqwest::Result<reqwest::Client> {
        self.client_builder().build()
    }

    /// [`HostPolicy::http_client`]'s builder, for more options.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder().dns_resolver(self.resolver())
    }
}

/// Resolves names for `reqwest`, dropping the addresses the policy refuses.
#[derive(Debug)]
pub struct PolicyResolver {
    policy: HostPolicy,
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if policy.allows_name(&host) {
                return Ok(Box::new(all.into_iter()) as reqwest::dns::Addrs);
            }
            let allowed: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| policy.allows(a.ip()))
                .collect();
            if allowed.is_empty()
                && let Some(first) = all.first()
            {
                return Err(Box::new(HostRefused {
                    what: "connecting to".into(),
                    target: host.clone(),
                    host,
                    address: first.ip(),
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An IPv4 address written as IPv6 (`::ffff:10.0.0.1`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Networks that are not the public internet (IANA's special-purpose registries): this
/// host, private and shared (carrier-grade NAT) ranges, link-local (cloud metadata),
/// documentation, benchmarking, multicast and reserved ranges, unique-local IPv6, and
/// IPv6 forms that embed an IPv4 address (NAT64, 6to4, Teredo).
const NON_PUBLIC: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/32",
    "2001:db8::/32",
    "2002::/16",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

fn is_public(ip: IpAddr) -> bool {
    use std::sync::OnceLock;
    static NETS: OnceLock<Vec<IpNet>> = OnceLock::new();
    let nets = NETS.get_or_init(|| {
        NON_PUBLIC
            .iter()
            .map(|n| n.parse().expect("a network"))
            .collect()
    });
    !nets.iter().any(|n| n.contains(&ip))
}

fn is_host_name(entry: &str) -> bool {
    entry.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_public_addresses_are_allowed_by_default() {
        let policy = HostPolicy::default();
        for public in ["8.8.8.8", "52.216.0.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(policy.allows(ip(public)), "{public}");
        }
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.31.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:a00:1::",
        ] {
            assert!(!policy.allows(ip(private)), "{private}");
        }
    }

    #[test]
    fn listed_networks_addresses_and_names_are_allowed() {
        let entries = ["10.0.0.0/8", "127.0.0.1", "[::1]", "Catalog.Internal"]
            .map(String::from)
            .to_vec();
        let policy = HostPolicy::allowing(&entries).unwrap();
        assert!(policy.allows(ip("10.9.8.7")));
        assert!(policy.allows(ip("127.0.0.1")));
        assert!(policy.allows(ip("::ffff:127.0.0.1")));
        assert!(policy.allows(ip("::1")));
        assert!(!policy.allows(ip("127.0.0.2")));
        assert!(!policy.allows(ip("192.168.0.1")));
        assert!(policy.allows_name("catalog.internal"));
        assert!(!policy.allows_name("other.internal"));
        assert!(HostPolicy::unrestricted().allows(ip("169.254.169.254")));
    }

    #[test]
    fn entries_that_are_neither_names_nor_networks_are_refused() {
        for bad in ["10.0.0.0/33", "http://x", "a b", "x..y"] {
            let err = HostPolicy::allowing(&[bad.to_string()]).unwrap_err();
            assert!(err.contains("network.allowed_hosts"), "{err}");
        }
    }

    #[tokio::test]
    async fn urls_are_checked_by_their_hosts_addresses() {
        let policy = HostPolicy::default();
        let err = policy
            .check_url("catalog uri", "http://169.254.169.254/latest/meta-data")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("169.254.169.254") && text.contains("network.allowed_hosts"),
            "{text}"
        );
        // `localhost` resolves to loopback.
        assert!(
            policy
                .check_url("s3.endpoint", "http://localhost:8333")
                .await
                .is_err()
        );
        assert!(
            policy
                .check_url("s3.endpoint", "http://[::1]:1")
                .await
                .is_err()
        );
        assert!(policy.check_url("x", "not a url").await.is_ok());
        assert!(policy.check_url("x", "https://8.8.8.8").await.is_ok());
        let local = HostPolicy::allowing(&["localhost".into()]).unwrap();
        assert!(
            local
                .check_url("s3.endpoint", "http://LOCALHOST:8333")
                .await
                .is_ok()
        );
    }
}

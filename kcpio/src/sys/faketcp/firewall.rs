//! The firewall rules that keep the kernel's own TCP socket silent.
//!
//! One nftables table per fake-TCP socket, named `kcpio_ftcp_<pid>_<port>`,
//! in the `ip` family (`ip6` for an IPv6 socket), with one chain on the
//! output hook at `raw` priority (before conntrack) that drops what the
//! kernel would send from the port: segments with TTL (hop limit) 1 (the
//! kernel socket's ACKs, retransmits and FIN, once its TTL is 1) and RSTs
//! (the kernel's answer to a segment of a flow it no longer knows, sent
//! with the default TTL). kcpio's own segments leave through the raw socket
//! with TTL 64 and never carry RST.
//!
//! Installing replaces a table of the same name and deletes every
//! `kcpio_ftcp_*` table of either family whose process is gone (a crash
//! left it), so rules never pile up; dropping the guard deletes the table.
//! Without `nft` the same rules go into a chain of the `raw` table of
//! `iptables` (`ip6tables`), named `kcpio_<pid>_<port>` and jumped to from
//! `OUTPUT`, with the same clean-up in that tool.

use std::io;
use std::process::{Command, Stdio};

const PREFIX: &str = "kcpio_ftcp_";
const CHAIN_PREFIX: &str = "kcpio_";

/// Which tool holds the rules.
#[derive(Debug)]
enum Backend {
    Nft,
    Iptables,
}

/// The IP version of the segments the rules silence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    V4,
    V6,
}

impl Family {
    /// The nftables family.
    fn nft(self) -> &'static str {
        match self {
            Self::V4 => "ip",
            Self::V6 => "ip6",
        }
    }

    /// The iptables tool.
    fn iptables(self) -> &'static str {
        match self {
            Self::V4 => "iptables",
            Self::V6 => "ip6tables",
        }
    }

    /// The nftables match of the kernel socket's segments (TTL 1).
    fn nft_ttl1(self) -> &'static str {
        match self {
            Self::V4 => "ip ttl 1",
            Self::V6 => "ip6 hoplimit 1",
        }
    }

    /// The iptables match of the kernel socket's segments (TTL 1).
    fn iptables_ttl1(self) -> [&'static str; 4] {
        match self {
            Self::V4 => ["-m", "ttl", "--ttl-eq", "1"],
            Self::V6 => ["-m", "hl", "--hl-eq", "1"],
        }
    }
}

/// Installed rules; removed on drop.
#[derive(Debug)]
pub(crate) struct Firewall {
    backend: Backend,
    family: Family,
    name: String,
}

/// Runs `cmd`, feeding `stdin`; `Ok(stdout)` when it exits 0.
fn run(cmd: &str, args: &[&str], stdin: Option<&str>) -> io::Result<String> {
    let mut child = Command::new(cmd)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let kind = if err.contains("Operation not permitted") || err.contains("Permission denied") {
        io::ErrorKind::PermissionDenied
    } else {
        io::ErrorKind::Other
    };
    Err(io::Error::new(
        kind,
        format!(
            "fake TCP: `{cmd} {}` failed{}: {}",
            args.join(" "),
            if kind == io::ErrorKind::PermissionDenied {
                " (fake TCP needs CAP_NET_ADMIN to install its firewall rules)"
            } else {
                ""
            },
            err.trim()
        ),
    ))
}

/// Whether the process `pid` is alive (in this pid namespace).
fn alive(pid: u32) -> bool {
    pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a `<prefix><pid>_<port>` name, if it is one of ours.
fn owner(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let (pid, port) = rest.split_once('_')?;
    port.parse::<u16>().ok()?;
    pid.parse().ok()
}

impl Firewall {
    /// Silences the kernel's TCP segments of `family` from local `port`.
    ///
    /// # Errors
    ///
    /// `PermissionDenied` naming `CAP_NET_ADMIN` without the privilege;
    /// `NotFound` when neither `nft` nor `iptables` (`ip6tables`) exists;
    /// the tool's message otherwise.
    pub(crate) fn install(family: Family, port: u16) -> io::Result<Self> {
        let pid = std::process::id();
        match Self::install_nft(family, pid, port) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Self::install_iptables(family, pid, port).map_err(|e2| {
                    if e2.kind() == io::ErrorKind::NotFound {
                        io::Error::new(
                            io::ErrorKind::NotFound,
                            format!(
                                "fake TCP needs `nft` (nftables) or `{}` to silence the kernel's socket",
                                family.iptables()
                            ),
                        )
                    } else {
                        e2
                    }
                })
            }
            other => other,
        }
    }

    fn install_nft(family: Family, pid: u32, port: u16) -> io::Result<Self> {
        let name = format!("{PREFIX}{pid}_{port}");
        let fam = family.nft();
        // Every family's tables: a crashed IPv6 socket's table goes at the
        // next start of an IPv4 one too.
        let tables = run("nft", &["list", "tables"], None)?;
        let mut script = String::new();
        for t in tables.lines() {
            let Some((their_fam, existing)) = t
                .trim()
                .strip_prefix("table ")
                .and_then(|t| t.split_once(' '))
            else {
                continue;
            };
            if matches!(their_fam, "ip" | "ip6")
                && (their_fam, existing) != (fam, name.as_str())
                && owner(existing, PREFIX).is_some_and(|p| !alive(p))
            {
                script.push_str(&format!("delete table {their_fam} {existing}\n"));
            }
        }
        let ttl1 = family.nft_ttl1();
        // Declaring then deleting makes the replacement idempotent.
        script.push_str(&format!(
            "table {fam} {name} {{}}\ndelete table {fam} {name}\n\
             table {fam} {name} {{\n  chain out {{\n    type filter hook output priority raw; policy accept;\n    \
             tcp sport {port} {ttl1} drop\n    tcp sport {port} tcp flags & rst == rst drop\n  }}\n}}\n"
        ));
        run("nft", &["-f", "-"], Some(&script))?;
        Ok(Self {
            backend: Backend::Nft,
            family,
            name,
        })
    }

    fn install_iptables(family: Family, pid: u32, port: u16) -> io::Result<Self> {
        let name = format!("{CHAIN_PREFIX}{pid}_{port}");
        let tool = family.iptables();
        let ipt = |args: &[&str]| run(tool, &[&["-w", "-t", "raw"], args].concat(), None);
        let listing = ipt(&["-S"])?;
        for line in listing.lines() {
            if let Some(chain) = line.strip_prefix("-N ")
                && (chain == name || owner(chain, CHAIN_PREFIX).is_some_and(|p| !alive(p)))
            {
                remove_iptables_chain(tool, chain);
            }
        }
        let p = port.to_string();
        ipt(&["-N", &name])?;
        let ttl1 = [
            &["-A", &name, "-p", "tcp", "--sport", &p][..],
            &family.iptables_ttl1(),
            &["-j", "DROP"],
        ]
        .concat();
        let rules: [&[&str]; 3] = [
            &ttl1,
            &[
                "-A",
                &name,
                "-p",
                "tcp",
                "--sport",
                &p,
                "--tcp-flags",
                "RST",
                "RST",
                "-j",
                "DROP",
            ],
            &["-I", "OUTPUT", "-j", &name],
        ];
        let fw = Self {
            backend: Backend::Iptables,
            family,
            name: name.clone(),
        };
        for r in rules {
            ipt(r)?; // on error `fw` drops and removes what was added
        }
        Ok(fw)
    }

    /// The table's (or chain's) name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// Unhooks, flushes and deletes a chain of the raw table of `tool`
/// (`iptables` or `ip6tables`); errors ignored (parts may be missing).
fn remove_iptables_chain(tool: &str, chain: &str) {
    for args in [
        &["-D", "OUTPUT", "-j", chain][..],
        &["-F", chain],
        &["-X", chain],
    ] {
        let _ = run(tool, &[&["-w", "-t", "raw"], args].concat(), None);
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        match self.backend {
            Backend::Nft => {
                let fam = self.family.nft();
                let _ = run("nft", &["delete", "table", fam, &self.name], None);
            }
            Backend::Iptables => remove_iptables_chain(self.family.iptables(), &self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_parsed_from_our_names_only() {
        assert_eq!(owner("kcpio_ftcp_123_29900", PREFIX), Some(123));
        assert_eq!(owner("kcpio_ftcp_123", PREFIX), None);
        assert_eq!(owner("kcpio_ftcp_x_1", PREFIX), None);
        assert_eq!(owner("filter", PREFIX), None);
        assert_eq!(owner("kcpio_7_80", CHAIN_PREFIX), Some(7));
        assert!(alive(std::process::id()));
    }
}

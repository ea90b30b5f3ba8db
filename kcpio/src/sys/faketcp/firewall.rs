//! The firewall rules that keep the kernel's own TCP socket silent.
//!
//! One nftables table per fake-TCP socket, named `kcpio_ftcp_<pid>_<port>`,
//! in the `ip` family, with one chain on the output hook at `raw` priority
//! (before conntrack) that drops what the kernel would send from the port:
//! segments with TTL 1 (the kernel socket's ACKs, retransmits and FIN, once
//! its TTL is 1) and RSTs (the kernel's answer to a segment of a flow it no
//! longer knows, sent with the default TTL). kcpio's own segments leave
//! through the raw socket with TTL 64 and never carry RST.
//!
//! Installing replaces a table of the same name and deletes every
//! `kcpio_ftcp_*` table whose process is gone (a crash left it), so rules
//! never pile up; dropping the guard deletes the table. Without `nft` the
//! same rules go into an iptables chain of the `raw` table, named
//! `kcpio_<pid>_<port>` and jumped to from `OUTPUT`, with the same clean-up.

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

/// Installed rules; removed on drop.
#[derive(Debug)]
pub(crate) struct Firewall {
    backend: Backend,
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
    /// Silences the kernel's TCP segments from local `port`.
    ///
    /// # Errors
    ///
    /// `PermissionDenied` naming `CAP_NET_ADMIN` without the privilege;
    /// `NotFound` when neither `nft` nor `iptables` exists; the tool's
    /// message otherwise.
    pub(crate) fn install(port: u16) -> io::Result<Self> {
        let pid = std::process::id();
        match Self::install_nft(pid, port) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Self::install_iptables(pid, port)
                .map_err(|e2| {
                    if e2.kind() == io::ErrorKind::NotFound {
                        io::Error::new(
                            io::ErrorKind::NotFound,
                            "fake TCP needs `nft` (nftables) or `iptables` to silence the kernel's socket",
                        )
                    } else {
                        e2
                    }
                }),
            other => other,
        }
    }

    fn install_nft(pid: u32, port: u16) -> io::Result<Self> {
        let name = format!("{PREFIX}{pid}_{port}");
        let tables = run("nft", &["list", "tables", "ip"], None)?;
        let mut script = String::new();
        for t in tables.lines() {
            let Some(existing) = t.trim().strip_prefix("table ip ") else {
                continue;
            };
            if existing != name && owner(existing, PREFIX).is_some_and(|p| !alive(p)) {
                script.push_str(&format!("delete table ip {existing}\n"));
            }
        }
        // Declaring then deleting makes the replacement idempotent.
        script.push_str(&format!(
            "table ip {name} {{}}\ndelete table ip {name}\n\
             table ip {name} {{\n  chain out {{\n    type filter hook output priority raw; policy accept;\n    \
             tcp sport {port} ip ttl 1 drop\n    tcp sport {port} tcp flags & rst == rst drop\n  }}\n}}\n"
        ));
        run("nft", &["-f", "-"], Some(&script))?;
        Ok(Self {
            backend: Backend::Nft,
            name,
        })
    }

    fn install_iptables(pid: u32, port: u16) -> io::Result<Self> {
        let name = format!("{CHAIN_PREFIX}{pid}_{port}");
        let ipt = |args: &[&str]| run("iptables", &[&["-w", "-t", "raw"], args].concat(), None);
        let listing = ipt(&["-S"])?;
        for line in listing.lines() {
            if let Some(chain) = line.strip_prefix("-N ")
                && (chain == name || owner(chain, CHAIN_PREFIX).is_some_and(|p| !alive(p)))
            {
                remove_iptables_chain(chain);
            }
        }
        let p = port.to_string();
        ipt(&["-N", &name])?;
        let rules: [&[&str]; 3] = [
            &[
                "-A", &name, "-p", "tcp", "--sport", &p, "-m", "ttl", "--ttl-eq", "1", "-j", "DROP",
            ],
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

/// Unhooks, flushes and deletes an iptables chain of the raw table; errors
/// ignored (parts may be missing).
fn remove_iptables_chain(chain: &str) {
    for args in [
        &["-D", "OUTPUT", "-j", chain][..],
        &["-F", chain],
        &["-X", chain],
    ] {
        let _ = run("iptables", &[&["-w", "-t", "raw"], args].concat(), None);
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        match self.backend {
            Backend::Nft => {
                let _ = run("nft", &["delete", "table", "ip", &self.name], None);
            }
            Backend::Iptables => remove_iptables_chain(&self.name),
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

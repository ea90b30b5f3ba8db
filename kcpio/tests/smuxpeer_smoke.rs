//! The Go smux peer harness on its own: a Go client against a Go server for
//! smux v1.5.16 and v1.5.58, over TCP and over kcp-go, v1 and v2, with and
//! without snappy framing. If these fail, the mux interop tests mean nothing.
//!
//! Without Go these tests print `SKIPPED: ...` and pass; `KCPIO_REQUIRE_GO=1`
//! makes a missing Go a failure.

use kcpio_testkit as support;

use std::time::Duration;

use support::smuxpeer::{self, SmuxServer, SmuxVersion, report_ok};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn go_to_go(version: SmuxVersion, common: &[&str], server: &[&str], client: &[&str]) {
    let Some(bin) = smuxpeer::binary(version) else {
        return;
    };
    let mut server_args = common.to_vec();
    server_args.extend_from_slice(server);
    let mut srv = SmuxServer::spawn(&bin, &server_args).await;
    let mut client_args = common.to_vec();
    client_args.extend_from_slice(client);
    let run = smuxpeer::run_client(&bin, srv.addr(), &client_args, TIMEOUT).await;
    let report = srv.report(TIMEOUT).await;
    let ctx = format!("{version:?} {common:?}");
    assert!(
        report_ok(run.json.as_ref()),
        "{ctx}: client {run:?}\nserver log: {:?}",
        srv.log()
    );
    assert!(
        report_ok(report.as_ref()),
        "{ctx}: server report {report:?}\nlog: {:?}",
        srv.log()
    );
    let client = run.json.as_ref().expect("client report");
    assert_eq!(client["smux"], version.as_str(), "{ctx}: {client}");
    assert_eq!(client["streams"], 8, "{ctx}: {client}");
    assert_eq!(client["bytes"], 8 * 200_000, "{ctx}: {client}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_client_go_server_both_versions_tcp_and_kcp() {
    for version in SmuxVersion::ALL {
        for common in [
            &["--transport", "tcp", "--smuxver", "1"][..],
            &["--transport", "tcp", "--smuxver", "2", "--snappy"][..],
            &["--transport", "kcp", "--smuxver", "2"][..],
            &[
                "--transport",
                "kcp",
                "--smuxver",
                "1",
                "--snappy",
                "--crypt",
                "aes-128",
                "--datashard",
                "10",
                "--parityshard",
                "3",
            ][..],
        ] {
            go_to_go(
                version,
                common,
                &[
                    "--app",
                    "echo",
                    "--max-streams",
                    "8",
                    "--timeout",
                    "60s",
                    "--quiet",
                ],
                &[
                    "--app",
                    "echo",
                    "--streams",
                    "8",
                    "--bytes",
                    "200000",
                    "--quiet",
                ],
            )
            .await;
        }
    }
}

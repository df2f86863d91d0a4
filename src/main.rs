//! The `cutover` binary: parse, run, print, map the outcome to an exit code.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use cutover::cli::{Cli, Format};

fn main() -> ExitCode {
    // A panic's message goes out without any password a URL in it holds.
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "cutover: internal error{place}: {}",
            cutover::spec::mask_passwords(&message)
        );
    }));
    let cli = Cli::parse(); // clap exits 2 on usage errors
    match cutover::run(&cli) {
        Ok(mut out) => {
            // Every JSON document says which cutover made it, and when.
            if let serde_json::Value::Object(doc) = &mut out.json {
                doc.entry("cutover_version")
                    .or_insert_with(|| env!("CARGO_PKG_VERSION").into());
                doc.entry("generated_at").or_insert_with(|| {
                    cutover::report::timestamp(std::time::SystemTime::now()).into()
                });
            }
            let mut stdout = std::io::stdout().lock();
            let printed = match cli.format {
                Format::Json => serde_json::to_writer_pretty(&mut stdout, &out.json)
                    .map_err(std::io::Error::from)
                    .and_then(|()| writeln!(stdout)),
                Format::Table => write!(stdout, "{}", out.text),
            };
            if let Err(e) = printed.and_then(|()| stdout.flush()) {
                // A closed pipe is the reader's choice; anything else is ours.
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("cutover: writing the report: {e}");
                    return ExitCode::from(2);
                }
            }
            // Findings are an answer, not an error: exit 1, like grep.
            ExitCode::from(if out.holds { 0 } else { 1 })
        }
        Err(err) => {
            // Every message names URLs without their passwords; this also
            // covers any text a driver or a parser quoted.
            let err = cutover::spec::mask_passwords(&format!("{err:#}"));
            eprintln!("cutover: {err}");
            if cli.format == Format::Json {
                // Scripts reading stdout still get one JSON document.
                println!(
                    "{}",
                    serde_json::json!({ "verdict": "error", "error": err })
                );
            }
            ExitCode::from(2)
        }
    }
}

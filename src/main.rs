//! The `cutover` binary: parse, run, print, map the outcome to an exit code.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use cutover::cli::{Cli, Format};

fn main() -> ExitCode {
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
            eprintln!("cutover: {err:#}");
            if cli.format == Format::Json {
                // Scripts reading stdout still get one JSON document.
                println!(
                    "{}",
                    serde_json::json!({ "verdict": "error", "error": format!("{err:#}") })
                );
            }
            ExitCode::from(2)
        }
    }
}

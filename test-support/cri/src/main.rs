//! `cri`: one CRI call from the command line, for the bench (`cri pull SOCKET IMAGE`: the
//! kubelet's `PullImage`) and by hand (`cri version SOCKET`).

use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cri version SOCKET | cri pull SOCKET IMAGE";
    let (Some(command), Some(socket)) = (args.first(), args.get(1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let mut cri = match cri_client::Cri::connect(Path::new(socket)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cri: {e}");
            std::process::exit(1);
        }
    };
    let result = match (command.as_str(), args.get(2)) {
        ("version", None) => cri.version().map(|v| format!("{} {}", v.runtime_name, v.runtime_version)),
        ("pull", Some(image)) => cri.pull_image(image),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    match result {
        Ok(out) => println!("{out}"),
        Err(status) => {
            // The gRPC code and message, as crictl prints them.
            eprintln!("cri: rpc error: code = {:?} desc = {}", status.code(), status.message());
            std::process::exit(1);
        }
    }
}

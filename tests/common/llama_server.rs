//! llama.cpp's real server, from PyPI's xllamacpp, for the tests that attach to one.

use std::net::TcpListener;
use std::process::{Command, Stdio};

/// The real llama.cpp server, started through our script on a free port, stopped on drop.
pub struct LlamaServer {
    child: std::process::Child,
    pub url: String,
}

impl LlamaServer {
    pub fn start(parallel: usize) -> Self {
        let probe = Command::new("python3")
            .args(["-c", "import xllamacpp"])
            .output();
        assert!(
            probe.is_ok_and(|o| o.status.success()),
            "xllamacpp is not installed: `pip install xllamacpp==2026.10.11549` (.ci/run installs it); this test needs the real llama.cpp server"
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/llamacpp-server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args([
                "--port",
                &port.to_string(),
                "--parallel",
                &parallel.to_string(),
            ])
            .env("INFERLAB_MODEL", super::real_model())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(
            line.starts_with("listening on"),
            "the server script said {line:?}"
        );
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // SIGTERM: the script stops the server cleanly.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

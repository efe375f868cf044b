//! Waiting for the signals that end a long-running command (a server, a gateway, a
//! dashboard): Ctrl-C or SIGTERM.

/// Returns at the first SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

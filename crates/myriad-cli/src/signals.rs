//! Waiting for the signals that end a long-running command (a server, a gateway, a
//! dashboard): Ctrl-C or SIGTERM.

/// Waits for the signal that stops a server: SIGTERM is a planned stop of this server (it
/// hands its partitions to their copies first), SIGINT (Ctrl-C, `cluster down`) stops it at
/// once.
pub async fn server_stop_signal() -> myriad_server::Stop {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        let _ = tokio::signal::ctrl_c().await;
        return myriad_server::Stop::Now;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => myriad_server::Stop::Now,
        _ = term.recv() => myriad_server::Stop::HandOver,
    }
}

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

//! `myriad top`: the dashboard's view (`cluster_view.rs`) as a live terminal screen,
//! refreshed every `--interval` seconds; `q`, Esc or Ctrl-C quits. With `--once`, or when
//! stdout is not a terminal, it prints one view as text and exits.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use myriad_client::Client;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};

use crate::cluster_view::{ClusterView, ServerView, Watcher};
use crate::fs_cmds::human;

#[derive(clap::Args)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2.0)]
    pub interval: f64,
    /// Print one view as text and exit (two rounds a second apart, for the rates).
    #[arg(long)]
    pub once: bool,
}

const HEADERS: [&str; 11] = [
    "id",
    "address",
    "zone",
    "state",
    "health",
    "prim/copy",
    "req/s",
    "fsync/s",
    "disk",
    "files",
    "replicas",
];

fn health(s: &ServerView) -> &'static str {
    match (s.reachable, s.serving) {
        (true, true) => "ok",
        (true, false) => "not serving",
        (false, _) => "unreachable",
    }
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// One server's cells, in `HEADERS` order.
fn cells(s: &ServerView) -> [String; 11] {
    let disk = if s.disk_total_bytes > 0 {
        format!(
            "{} / {} ({:.0}%)",
            human(s.disk_used_bytes),
            human(s.disk_total_bytes),
            s.disk_used_bytes as f64 * 100.0 / s.disk_total_bytes as f64
        )
    } else {
        "-".into()
    };
    [
        s.id.to_string(),
        s.addr.clone(),
        if s.zone.is_empty() {
            "-".into()
        } else {
            s.zone.clone()
        },
        s.state.to_string(),
        health(s).to_string(),
        format!("{}/{}", s.primaries, s.backups),
        rate(s.requests_per_s),
        rate(s.syncs_per_s),
        disk,
        s.files.map_or_else(|| "-".into(), |f| f.to_string()),
        s.replicas_held.to_string(),
    ]
}

fn summary(v: &ClusterView) -> String {
    let ok = v.servers.iter().filter(|s| health(s) == "ok").count();
    format!(
        "cluster {}   map epoch {}   leader {}   servers ok {}/{}",
        v.cluster,
        v.epoch,
        v.leader.map_or_else(|| "none".into(), |l| l.to_string()),
        ok,
        v.servers.len()
    )
}

/// The lines under the table: moves, popular directories, recent errors.
fn details(v: &ClusterView) -> Vec<String> {
    let mut out = Vec::new();
    if v.moving.is_empty() {
        out.push("partitions moving: none".into());
    } else {
        let m: Vec<String> = v
            .moving
            .iter()
            .map(|m| match m.from {
                0 => format!("{} (+{})", m.partition, m.to),
                from => format!("{} ({from}->{})", m.partition, m.to),
            })
            .collect();
        out.push(format!("partitions moving: {}", m.join(" ")));
    }
    if v.popular.is_empty() {
        out.push("popular directories: none reported".into());
    } else {
        let p: Vec<String> = v
            .popular
            .iter()
            .map(|p| format!("{} @{}", p.dir, p.server))
            .collect();
        out.push(format!("popular directories: {}", p.join("  ")));
    }
    if v.errors.is_empty() {
        out.push("recent errors: none".into());
    } else {
        out.push("recent errors:".into());
        out.extend(v.errors.iter().take(10).map(|e| {
            let who = e
                .server
                .map_or_else(|| "cluster".into(), |s| format!("server {s}"));
            format!("  {who}: {}", e.message)
        }));
    }
    out
}

/// The view as plain text: a summary line, an aligned table, the details.
pub fn text(v: &ClusterView) -> String {
    let rows: Vec<[String; 11]> = v.servers.iter().map(cells).collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![summary(v)];
    out.push(line(HEADERS.iter().map(|h| (*h).to_string()).collect()));
    out.extend(rows.into_iter().map(|r| line(r.to_vec())));
    out.extend(details(v));
    out.join("\n") + "\n"
}

fn draw(f: &mut ratatui::Frame<'_>, v: &ClusterView) {
    let [head, table, foot] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(v.servers.len().min(40) as u16 + 3),
        Constraint::Min(4),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(summary(v)).block(Block::bordered().title(" myriad top (q quits) ")),
        head,
    );
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let rows = v.servers.iter().map(|s| {
        let colour = match health(s) {
            "ok" => Color::Reset,
            "not serving" => Color::Yellow,
            _ => Color::Red,
        };
        Row::new(cells(s).to_vec()).style(Style::default().fg(colour))
    });
    let widths = [
        Constraint::Length(4),
        Constraint::Length(21),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(12),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(26),
        Constraint::Length(9),
        Constraint::Length(8),
    ];
    f.render_widget(
        Table::new(rows, widths)
            .header(Row::new(HEADERS.to_vec()).style(bold))
            .block(Block::bordered().title(" servers ")),
        table,
    );
    let lines: Vec<Line<'_>> = details(v).into_iter().map(Line::from).collect();
    f.render_widget(Paragraph::new(lines).block(Block::bordered()), foot);
}

/// Waits up to `left` for a key that quits; true if one came.
fn quit_pressed(left: Duration) -> anyhow::Result<bool> {
    let until = Instant::now() + left;
    loop {
        let now = Instant::now();
        if now >= until {
            return Ok(false);
        }
        if event::poll(until - now)?
            && let Event::Key(k) = event::read()?
            && k.kind == KeyEventKind::Press
            && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL)))
        {
            return Ok(true);
        }
    }
}

pub async fn run(args: TopArgs, client: Client, cluster: String) -> anyhow::Result<()> {
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        anyhow::bail!("--interval must be at least 0.1 seconds");
    }
    let mut watcher = Watcher::new(client, cluster);
    if args.once || !std::io::stdout().is_terminal() {
        watcher.refresh().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        print!("{}", text(&watcher.refresh().await));
        return Ok(());
    }
    let interval = Duration::from_secs_f64(args.interval);
    let mut terminal = ratatui::init();
    let result = async {
        loop {
            let view = watcher.refresh().await;
            terminal.draw(|f| draw(f, &view))?;
            if tokio::task::block_in_place(|| quit_pressed(interval))? {
                return Ok(());
            }
        }
    }
    .await;
    ratatui::restore();
    result
}

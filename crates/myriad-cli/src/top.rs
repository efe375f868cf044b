//! `myriad top`: the dashboard's view (`cluster_view.rs`) as a live terminal screen,
//! refreshed every `--interval` seconds; `q`, Esc or Ctrl-C quits. With `--once`, or when
//! stdout is not a terminal, it prints one view as text and exits. Narrower than the whole
//! table (80 columns), it shows the columns that matter most, with every number whole; a
//! text that does not fit its column ends in "…", never cut silently.

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

const HEADERS: [&str; 12] = [
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
    "p99 ms",
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
fn cells(s: &ServerView) -> [String; 12] {
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
        s.p99_ms.map_or_else(|| "-".into(), |v| format!("{v:.2}")),
    ]
}

/// The columns shown (indexes into `HEADERS`) and the screen widths they get: all of them
/// when `width` allows, else the ones an operator needs first, fitting 80 columns.
fn columns(width: u16) -> (&'static [usize], &'static [u16]) {
    // The slowest 1% of answers to clients since the last round beside the rates.
    const ALL: [usize; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 11, 8, 9, 10];
    const ALL_WIDTHS: [u16; 12] = [4, 21, 6, 8, 12, 10, 9, 8, 8, 26, 9, 8];
    const NARROW: [usize; 8] = [0, 1, 3, 4, 5, 6, 7, 8];
    const NARROW_WIDTHS: [u16; 8] = [3, 15, 7, 11, 9, 7, 7, 11];
    let all: u16 = ALL_WIDTHS.iter().sum::<u16>() + ALL_WIDTHS.len() as u16 + 2;
    if width >= all {
        (&ALL, &ALL_WIDTHS)
    } else {
        (&NARROW, &NARROW_WIDTHS)
    }
}

/// `text` in at most `width` characters: cut with a closing "…" where it is longer.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// A server's disk in few characters: its use in percent and the disk's size.
fn disk_short(s: &ServerView) -> String {
    if s.disk_total_bytes == 0 {
        return "-".into();
    }
    format!(
        "{:.0}% of {}",
        s.disk_used_bytes as f64 * 100.0 / s.disk_total_bytes as f64,
        human(s.disk_total_bytes)
    )
}

/// A server's cells for `shown` columns (narrow: the disk as a percentage).
fn shown_cells(s: &ServerView, shown: &[usize]) -> Vec<String> {
    let all = cells(s);
    let narrow = shown.len() < HEADERS.len();
    shown
        .iter()
        .map(|&i| {
            if narrow && i == 8 {
                disk_short(s)
            } else {
                all[i].clone()
            }
        })
        .collect()
}

fn summary(v: &ClusterView) -> String {
    // The cluster's path last: where a narrow screen cuts, it cuts that.
    let ok = v.servers.iter().filter(|s| health(s) == "ok").count();
    format!(
        "servers ok {}/{}   map epoch {}   leader {}   cluster {}",
        ok,
        v.servers.len(),
        v.epoch,
        v.leader.map_or_else(|| "none".into(), |l| l.to_string()),
        v.cluster,
    )
}

/// The lines under the table: moves, popular directories, recent problems and recoveries.
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
    for (kind, title) in [
        ("problem", "recent problems"),
        ("recovery", "recent recoveries"),
    ] {
        let events: Vec<String> = v
            .errors
            .iter()
            .filter(|e| e.kind == kind)
            .take(5)
            .map(|e| {
                let who = e
                    .server
                    .map_or_else(|| "cluster".into(), |s| format!("server {s}"));
                format!("  {who}: {}", e.message)
            })
            .collect();
        if events.is_empty() {
            out.push(format!("{title}: none"));
        } else {
            out.push(format!("{title}:"));
            out.extend(events);
        }
    }
    out
}

/// The view as plain text for a terminal `width` columns wide: a summary line, the
/// cluster's health, an aligned table, the details.
pub fn text(v: &ClusterView, width: u16) -> String {
    let (shown, _) = columns(width);
    let rows: Vec<Vec<String>> = v.servers.iter().map(|s| shown_cells(s, shown)).collect();
    let headers: Vec<String> = shown.iter().map(|&i| HEADERS[i].to_string()).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
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
        padded.join(" ").trim_end().to_string()
    };
    // Only the table's numbers are never cut; the lines of text fit the width, marked "…".
    let cut = |l: String| fit(&l, usize::from(width));
    let mut out = vec![cut(summary(v)), cut(v.health.line())];
    out.push(line(headers));
    out.extend(rows.into_iter().map(line));
    out.extend(details(v).into_iter().map(cut));
    out.join("\n") + "\n"
}

fn draw(f: &mut ratatui::Frame<'_>, v: &ClusterView) {
    let [head, table, foot] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(v.servers.len().min(40) as u16 + 3),
        Constraint::Min(4),
    ])
    .areas(f.area());
    let health_colour = match v.health.state {
        "healthy" => Color::Green,
        "degraded" => Color::Yellow,
        _ => Color::Red,
    };
    let inner = usize::from(f.area().width.saturating_sub(2));
    let head_lines = vec![
        Line::from(fit(&summary(v), inner)),
        Line::from(fit(&v.health.line(), inner)).style(Style::default().fg(health_colour)),
    ];
    f.render_widget(
        Paragraph::new(head_lines).block(Block::bordered().title(" myriad top (q quits) ")),
        head,
    );
    let (shown, col_widths) = columns(f.area().width);
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let rows = v.servers.iter().map(|s| {
        let colour = match health(s) {
            "ok" => Color::Reset,
            "not serving" => Color::Yellow,
            _ => Color::Red,
        };
        let fitted: Vec<String> = shown_cells(s, shown)
            .iter()
            .zip(col_widths)
            .map(|(c, w)| fit(c, usize::from(*w)))
            .collect();
        Row::new(fitted).style(Style::default().fg(colour))
    });
    let widths: Vec<Constraint> = col_widths.iter().map(|w| Constraint::Length(*w)).collect();
    let headers: Vec<String> = shown
        .iter()
        .zip(col_widths)
        .map(|(&i, w)| fit(HEADERS[i], usize::from(*w)))
        .collect();
    f.render_widget(
        Table::new(rows, widths)
            .header(Row::new(headers).style(bold))
            .block(Block::bordered().title(" servers ")),
        table,
    );
    let lines: Vec<Line<'_>> = details(v)
        .into_iter()
        .map(|l| Line::from(fit(&l, inner)))
        .collect();
    f.render_widget(Paragraph::new(lines).block(Block::bordered()), foot);
}

/// The width `--once` prints for: $COLUMNS, else the terminal's when stdout is one, else
/// no limit (output to a file or a pipe is never cut).
fn text_width() -> u16 {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .or_else(|| {
            std::io::stdout()
                .is_terminal()
                .then(|| ratatui::crossterm::terminal::size().ok().map(|(w, _)| w))
                .flatten()
        })
        .unwrap_or(u16::MAX)
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
        print!("{}", text(&watcher.refresh().await, text_width()));
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

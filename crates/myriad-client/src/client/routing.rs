//! The request loop: where a request goes under the current map, and what happens when it
//! cannot be answered there (a redirect, a map too old or too new, a moved shard, a busy
//! partition, a failover): retried until its deadline, each change sent once, held changes
//! of a failed primary sent again first (`held.rs`), an earlier partition asked for a
//! change's outcome before a try goes elsewhere (`recorded.rs`).

use std::time::Duration;

use myriad_placement::{ClusterMap, PartitionId, parent_of};
use myriad_proto::{
    ClientRequest, Endpoints, Envelope, Request, Response, ServerRequest, WireError,
};

use super::pacing::{NoCopy, Pacing};
use super::tries::{Before, Tries};
use super::{Client, MapState, Route};

/// Retries after redirects or `MapTooOld` before giving up (each one means the map changed).
const MAP_RETRIES_MAX: u32 = 5;
/// At least this long before asking a server that redirected without a newer map again (it
/// is behind a map change it will learn through the Raft group).
const REDIRECT_WAIT_MIN: Duration = Duration::from_millis(10);
/// How long a request to a partition no copy of which is up in the client's map keeps
/// asking for a newer map (a paused server is marked up again within a second of its
/// return) before it fails.
const NO_COPY_WAIT: Duration = Duration::from_secs(2);

impl Client {
    pub(crate) async fn route(&self, route: Route, req: Request) -> Result<Response, WireError> {
        self.route_with(route, req, true, &mut Tries::default())
            .await
    }

    /// `route` for a change sent once whose earlier tries went out in earlier calls
    /// (`tries`: a change answered behind, sent until taken; a held change sent again).
    pub(crate) async fn route_tried(
        &self,
        route: Route,
        req: Request,
        tries: &mut Tries,
    ) -> Result<Response, WireError> {
        Box::pin(self.route_with(route, req, true, tries)).await
    }

    /// `route` for the requests that recover a partition's held changes (`held.rs`): they
    /// must not wait for that recovery themselves.
    pub(crate) async fn route_unheld(
        &self,
        route: Route,
        req: Request,
    ) -> Result<Response, WireError> {
        // Boxed: this runs inside another request's future (debug builds overflowed the
        // stack with both inline).
        Box::pin(self.route_with(route, req, false, &mut Tries::default())).await
    }

    /// `route_unheld` for a held change sent again (`tries`: the partition that applied it).
    pub(crate) async fn route_unheld_tried(
        &self,
        route: Route,
        req: Request,
        tries: &mut Tries,
    ) -> Result<Response, WireError> {
        Box::pin(self.route_with(route, req, false, tries)).await
    }

    async fn route_with(
        &self,
        route: Route,
        req: Request,
        check_held: bool,
        tries: &mut Tries,
    ) -> Result<Response, WireError> {
        let mut pace = Pacing::new(self.config.request_timeout);
        let mut map_retries = 0;
        let mut busy_rounds = 0u32;
        let mut no_copy = NoCopy::default();
        loop {
            let st = self.st();
            let pid = self.partition_for(&st, &route);
            // Changes of this partition held until durable, answered by a primary that may
            // be gone: sent again before this request (`held.rs`).
            // Any partition's: a change here may depend on one held there.
            let held_route = check_held && !matches!(route, Route::Server(_));
            // Looked up once per try: the connection the checks see, the request's target,
            // the address a map push or a kept answer names.
            let target = Self::address(&st, &route, pid);
            let link = target
                .as_ref()
                .map_or(0, |(a, _)| self.transport.link(a).connection);
            if held_route {
                let stale = self.held_to_recover(pid);
                if !stale.is_empty() {
                    self.recover_held_first(pid, stale, &mut pace).await?;
                    continue;
                }
            }
            // A change whose name moved to `pid` since an earlier try went elsewhere.
            match self.before_try(pid, &req, tries, &mut pace).await? {
                Before::Send => {}
                Before::Answered(answer) => return Ok(*answer),
                Before::Again => continue,
            }
            let result = match self.send_once(&st, (&route, pid), &target, &req).await {
                // Answered over another connection than the one the checks above saw (the
                // server restarted as the request went): asked again after a recovery.
                Ok(_)
                    if held_route
                        && pace.in_time()
                        && crate::held_state::asks_again_safely(&req)
                        && self.held_needs_recovery_after(pid, &st, &route, link) =>
                {
                    self.held_suspect(pid);
                    continue;
                }
                Ok(r) => Ok(r),
                // The partition's server is unreachable or may not serve (no lease, or no
                // copy is up): a failover gives it a new primary within seconds. Learn the
                // newer map from any server and try again until the deadline.
                Err((WireError::Unavailable(why), _))
                    if !matches!(route, Route::Server(_) | Route::Copy(..))
                        && st.map.partition(pid).is_some_and(|p| p.replicas.len() > 1)
                        && pace.down_fits() =>
                {
                    tracing::debug!(partition = %pid, "unavailable ({why}); refreshing the map and retrying");
                    pace.down_pause().await;
                    self.refresh_map(pid).await;
                    continue;
                }
                // No copy of the partition is up in our map. A server that was down and is
                // back is up in a newer map we have not seen (nothing else would tell us:
                // no request reaches a server): ask for it, again after each pause, for
                // `NO_COPY_WAIT`. (Without this a client that saw a single-copy partition's
                // server marked down failed every request to it for good; asking only once
                // failed requests made while a paused server was being marked up again.)
                // A server down for longer fails requests to it in that time, not at the
                // request's deadline.
                Err((WireError::Unavailable(_), false)) => {
                    self.no_copy_up(pid, st.map.epoch, &mut pace, &mut no_copy)
                        .await?;
                    continue;
                }
                Err((e, false)) => return Err(e),
                Err((e, true)) => Err(e),
            };
            let addr = target.as_ref().map_or("", |(a, _)| a.as_str());
            match result {
                Err(WireError::Redirect(map)) => {
                    map_retries += 1;
                    self.redirected(*map, &route, pid, map_retries, &mut pace)
                        .await?;
                }
                // Asking the directory's home for its shard map is what `WrongShard` leads
                // to: a home answering that with `WrongShard` again is retried as `Busy`,
                // not followed (that would recurse without end).
                Err(WireError::WrongShard { .. })
                    if matches!(
                        req,
                        Request::Client(Envelope::Alone(ClientRequest::GetShardMap { .. }))
                    ) =>
                {
                    if !pace.busy_fits() {
                        return Err(WireError::Busy);
                    }
                    pace.busy_pause(REDIRECT_WAIT_MIN).await;
                }
                Err(WireError::WrongShard { dir, map }) => {
                    // A split moved the name, or our map of the directory is stale. Retried
                    // like `Busy`: during a split's last steps the map may be a step ahead.
                    // Asked as this request is: not recovering held changes first when
                    // this request is part of their recovery (it would wait for itself).
                    self.learn_shard_map_with(&dir, map.map(|m| *m), check_held)
                        .await;
                    if !pace.busy_fits() {
                        return Err(WireError::Busy);
                    }
                    if map_retries > 0 {
                        pace.busy_pause(Duration::ZERO).await;
                    }
                    map_retries = 1;
                }
                Err(WireError::MapTooOld(_)) => {
                    map_retries += 1;
                    self.map_too_old((addr, pid), &st.map, map_retries, &mut pace)
                        .await?;
                }
                // A server that holds the partition as a copy, not (yet) as its primary,
                // asked as if it were one (a map newer than that server's, or a copy
                // about to open it after a failover): as `Busy`, with the map looked at.
                Err(WireError::AskPrimary)
                    if !matches!(route, Route::Copy(..)) && pace.busy_fits() =>
                {
                    pace.busy_pause(Duration::ZERO).await;
                    self.refresh_map(pid).await;
                }
                Err(WireError::Busy) if pace.busy_fits() => {
                    pace.busy_pause(Duration::ZERO).await;
                    busy_rounds += 1;
                    // A server that keeps saying Busy may have lost its lease and been
                    // replaced (it answers Busy until it learns the new map): look.
                    if busy_rounds.is_multiple_of(10) {
                        self.refresh_map(pid).await;
                    }
                }
                Ok(answer @ Response::Applied { .. }) => {
                    return Ok(self.keep_applied((pid, &route), (addr, link), req, answer));
                }
                other => return other,
            }
        }
    }

    /// Sends again partition `pid`'s changes held until durable (`stale`) whose primary may
    /// be gone, before the request that found them; a failure is tried again after a
    /// pause, until the request's deadline.
    async fn recover_held_first(
        &self,
        pid: PartitionId,
        stale: Vec<PartitionId>,
        pace: &mut Pacing,
    ) -> Result<(), WireError> {
        // Boxed: a recovery routes requests of its own.
        let recovered = Box::pin(self.recover_before(pid, stale));
        if let Err(e) = recovered.await {
            if !pace.down_fits() {
                return Err(e);
            }
            tracing::debug!(partition = %pid, "held changes not recovered yet ({e}); retrying");
            pace.down_pause().await;
            self.refresh_map(pid).await;
        }
        Ok(())
    }

    /// No copy of partition `pid` is up in our map (of `epoch`). A server that was down
    /// and is back is up in a newer map we have not seen (nothing else would tell us: no
    /// request reaches a server): ask for it, again after each pause, for `NO_COPY_WAIT`.
    /// (Without this a client that saw a single-copy partition's server marked down
    /// failed every request to it for good; asking only once failed requests made while a
    /// paused server was being marked up again.) A server down for longer fails requests
    /// to it in that time, not at the request's deadline.
    async fn no_copy_up(
        &self,
        pid: PartitionId,
        epoch: u64,
        pace: &mut Pacing,
        no_copy: &mut NoCopy,
    ) -> Result<(), WireError> {
        let until = *no_copy.since.get_or_insert_with(tokio::time::Instant::now) + NO_COPY_WAIT;
        if no_copy.refreshed {
            let next = pace.after_down_pause();
            if next >= pace.deadline || next >= until {
                return Err(WireError::Unavailable(format!(
                    "no copy of partition {pid} is up (cluster map epoch {epoch})"
                )));
            }
            pace.down_pause().await;
        }
        no_copy.refreshed = true;
        self.refresh_map(pid).await;
        Ok(())
    }

    /// Partition `pid` redirected us (the `retries`th time) with `map`: adopted if newer.
    /// Same cluster map: our shard map of the directory sent us there. Else the server is
    /// behind a map change we know of (it catches up through the Raft group): try again
    /// shortly.
    async fn redirected(
        &self,
        map: ClusterMap,
        route: &Route,
        pid: PartitionId,
        retries: u32,
        pace: &mut Pacing,
    ) -> Result<(), WireError> {
        let no_newer = || {
            WireError::Protocol(format!(
                "partition {pid} redirected but offered no newer map"
            ))
        };
        if retries > MAP_RETRIES_MAX {
            return Err(no_newer());
        }
        if !self.adopt(map) {
            match route_dir(route) {
                Some(dir) => self.shards.forget(dir),
                None if pace.busy_fits() => pace.busy_pause(REDIRECT_WAIT_MIN).await,
                None => return Err(no_newer()),
            }
        }
        Ok(())
    }

    /// One try of `req` at `target`, the server `route` names in map `st`: its answer, or
    /// the error and whether a server was tried (not when there is no address, e.g. no
    /// copy of the partition is up).
    async fn send_once(
        &self,
        st: &MapState,
        (route, pid): (&Route, PartitionId),
        target: &Result<(String, Endpoints), WireError>,
        req: &Request,
    ) -> Result<Response, (WireError, bool)> {
        let (addr, ends) = match target {
            Ok((addr, ends)) => (addr.as_str(), *ends),
            Err(e) => return Err((e.clone(), false)),
        };
        let caller = self.acting_caller();
        let call = self.transport.call_with_timeout(
            addr,
            st.map.epoch,
            ends,
            caller,
            req,
            self.config.request_timeout,
        );
        // A server that died without closing its connections (a host gone) never answers:
        // once its partition has another primary, the request goes there (a change
        // carries its `OnceId`: applied once).
        let moved = async {
            match route {
                Route::Server(_) | Route::Copy(..) => std::future::pending().await,
                _ => self.primary_moved(pid, addr).await,
            }
        };
        tokio::select! {
            r = call => r.map_err(|e| (e, true)),
            () = moved => Err((
                WireError::Unavailable(format!(
                    "{addr} did not answer and partition {pid} has another primary now"
                )),
                true,
            )),
        }
    }

    /// Gives the server at `addr` our cluster map `map` (it answered `MapTooOld`).
    pub(super) async fn push_map(
        &self,
        addr: &str,
        map: &ClusterMap,
    ) -> Result<Response, WireError> {
        let push = ServerRequest::InstallMap(Box::new(map.clone()));
        self.transport
            .call_with_timeout(
                addr,
                map.epoch,
                Endpoints::SERVER,
                &self.config.caller,
                &myriad_proto::Request::Server(push),
                self.config.request_timeout,
            )
            .await
    }
}

/// The directory whose shard map routed `route`, if any.
fn route_dir(route: &Route) -> Option<&str> {
    match route {
        Route::Entry(p) if p != "/" => Some(parent_of(p)),
        Route::Shard(dir, _) => Some(dir),
        _ => None,
    }
}

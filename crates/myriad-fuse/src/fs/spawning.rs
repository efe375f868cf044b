//! How a callback runs its operation: as the caller of the kernel request, on the tokio
//! runtime, or first polled on the FUSE thread when the mount may answer it itself.

use std::future::Future;
use std::sync::Arc;

use fuser::Request;
use myriad_proto::Caller;

use crate::mount::Mount;

use super::MyriadFs;

impl MyriadFs {
    pub(super) fn caller(&self, req: &Request) -> Caller {
        self.inner.callers.caller(req.pid(), req.uid(), req.gid())
    }

    /// `f`'s operation, as the request's caller: on a view of the mount whose client acts
    /// for that caller (`Mount::for_caller`).
    pub(super) fn op<F, Fut>(
        &self,
        req: &Request,
        f: F,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        F: FnOnce(Arc<Mount>, Caller) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let caller = self.caller(req);
        f(Arc::new(self.inner.for_caller(caller.clone())), caller)
    }

    /// Runs `f` on the runtime as the request's caller.
    pub(super) fn spawn<F, Fut>(&self, req: &Request, f: F)
    where
        F: FnOnce(Arc<Mount>, Caller) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(self.op(req, f));
    }

    /// `spawn` for a change the mount may answer itself (a create, mkdir, write, setattr,
    /// unlink or rmdir answered behind, a close with nothing to send, a listing's page a
    /// lease holds): first polled here, on the
    /// FUSE thread, so that such an answer costs no task switch (two thread wake-ups a
    /// request, the cost that dominated them on two cores). One that must wait goes to
    /// the runtime, which polls it again at once and registers there what it waits for
    /// (the first poll's waker wakes nothing).
    pub(super) fn spawn_here<F, Fut>(&self, req: &Request, f: F)
    where
        F: FnOnce(Arc<Mount>, Caller) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut op = Box::pin(self.op(req, f));
        let _runtime = self.rt.enter();
        let waker = std::task::Waker::noop();
        if op
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_ready()
        {
            return;
        }
        self.rt.spawn(op);
    }
}

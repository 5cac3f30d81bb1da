//! A test wrapper that keeps completions in an outbox, so tests can look at the caller's
//! own answer and drain the others separately.

#![allow(dead_code)]

use std::ops::{Deref, DerefMut};

use strata_group::*;
use strata_proto::ErrorCode;

#[derive(Debug)]
pub struct C {
    pub inner: GroupCoordinator,
    pub outbox: Vec<Completion>,
}

impl C {
    pub fn new(config: GroupConfig) -> Self {
        C {
            inner: GroupCoordinator::new(config),
            outbox: Vec::new(),
        }
    }

    pub fn join(&mut self, now: i64, ticket: u64, req: JoinGroup) -> Option<JoinResponse> {
        let (answer, done) = self.inner.join(now, ticket, req);
        self.outbox.extend(done);
        answer
    }

    pub fn sync(&mut self, now: i64, ticket: u64, req: SyncGroup) -> Option<SyncResponse> {
        let (answer, done) = self.inner.sync(now, ticket, req);
        self.outbox.extend(done);
        answer
    }

    pub fn leave(
        &mut self,
        now: i64,
        group_id: &str,
        members: Vec<(String, Option<String>)>,
    ) -> (ErrorCode, Vec<(String, ErrorCode)>) {
        let (code, per_member, done) = self.inner.leave(now, group_id, members);
        self.outbox.extend(done);
        (code, per_member)
    }

    pub fn tick(&mut self, now: i64) {
        let done = self.inner.tick(now);
        self.outbox.extend(done);
    }

    pub fn take_completions(&mut self) -> Vec<Completion> {
        let mut all = std::mem::take(&mut self.outbox);
        all.extend(self.inner.take_completions());
        all
    }
}

impl Deref for C {
    type Target = GroupCoordinator;
    fn deref(&self) -> &GroupCoordinator {
        &self.inner
    }
}

impl DerefMut for C {
    fn deref_mut(&mut self) -> &mut GroupCoordinator {
        &mut self.inner
    }
}

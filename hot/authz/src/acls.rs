//! The ACL set and the index that makes an authorization a handful of lookups.
//!
//! Kafka's AclAuthorizer keeps its ACLs in a sorted map keyed by resource pattern and,
//! for every check, reads the literal pattern, the literal `*` pattern and a range of
//! prefixed patterns (`matchingAcls`); StandardAuthorizer does the same over a sorted
//! set. Here, per resource type:
//!
//! * literal names are a hash map (one lookup);
//! * the literal `*` pattern has its own bucket;
//! * prefixed names are a sorted vector in which each name links to the longest other
//!   name that prefixes it. The greatest name not above the resource's name is either a
//!   prefix of it or shares with it a common prefix that bounds every pattern that can
//!   apply; either way, the longest applicable pattern is that name or one of its
//!   ancestors, and the shorter ones are its ancestors. A lookup is one binary search
//!   plus a walk up the (short) chain of nested prefixes: O(log n + depth).
//!
//! Each pattern's bucket keeps the `User:*` entries apart and the rest sorted by
//! principal, so a check reads only the entries for its principal and the wildcard,
//! even on a topic every principal has an ACL for.
//!
//! The whole set is also kept as a sorted set of bindings, which is what DescribeAcls,
//! DeleteAcls and serialization read: those are rare and may scan.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::binding::{AclBinding, AclBindingFilter, InvalidAcl, parse_host};
use crate::types::{PatternType, ResourceType, WILDCARD_PRINCIPAL, WILDCARD_RESOURCE};

/// How an entry's host matches a client address, parsed once when the ACL is added so
/// a check compares addresses instead of formatting one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostMatch {
    /// `*`.
    Any,
    /// One address (canonical: IPv4-mapped IPv6 unmapped).
    Ip(IpAddr),
    /// Unparseable (refused by validation, so never stored; kept so parsing is total).
    Never,
}

/// One indexed ACL.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) binding: Arc<AclBinding>,
    host: HostMatch,
}

impl Entry {
    fn new(binding: Arc<AclBinding>) -> Self {
        let host = match parse_host(&binding.entry.host) {
            Ok(None) => HostMatch::Any,
            Ok(Some(ip)) => HostMatch::Ip(ip),
            Err(()) => HostMatch::Never,
        };
        Self { binding, host }
    }

    fn principal(&self) -> &str {
        self.binding.entry.principal.as_str()
    }

    /// Whether the entry applies to a client at `ip` (already canonical).
    pub(crate) fn matches_host(&self, ip: IpAddr) -> bool {
        match self.host {
            HostMatch::Any => true,
            HostMatch::Ip(h) => h == ip,
            HostMatch::Never => false,
        }
    }
}

/// The entries of one resource pattern.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bucket {
    /// Entries for `User:*`, which apply to every principal; sorted by binding.
    any_principal: Vec<Entry>,
    /// Entries for named principals, sorted by binding, hence by principal (the pattern
    /// is the same for all of them).
    by_principal: Vec<Entry>,
}

impl Bucket {
    fn side(&mut self, binding: &AclBinding) -> &mut Vec<Entry> {
        if binding.entry.principal.as_str() == WILDCARD_PRINCIPAL {
            &mut self.any_principal
        } else {
            &mut self.by_principal
        }
    }

    fn insert(&mut self, binding: Arc<AclBinding>) {
        let side = self.side(&binding);
        let at = side.partition_point(|e| *e.binding < *binding);
        side.insert(at, Entry::new(binding));
    }

    fn remove(&mut self, binding: &AclBinding) {
        let side = self.side(binding);
        if let Ok(at) = side.binary_search_by(|e| (*e.binding).cmp(binding)) {
            side.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.any_principal.is_empty() && self.by_principal.is_empty()
    }

    /// The entries that can apply to `principal`: the wildcard's, then its own.
    pub(crate) fn candidates<'a>(&'a self, principal: &str) -> impl Iterator<Item = &'a Entry> {
        let start = self
            .by_principal
            .partition_point(|e| e.principal() < principal);
        let own = self.by_principal[start..]
            .iter()
            .take_while(move |e| e.principal() == principal);
        self.any_principal.iter().chain(own)
    }
}

/// The prefixed patterns of one resource type: names sorted, each linked to the
/// longest other name that is a prefix of it, so that once the longest pattern
/// prefixing a resource name is found (one binary search), the shorter ones are a walk
/// up the links.
#[derive(Debug, Clone, Default)]
struct PrefixIndex {
    keys: Vec<Box<str>>,
    /// For each key, the index of the longest other key that is a prefix of it.
    parents: Vec<Option<usize>>,
    buckets: Vec<Bucket>,
    /// Keys were added or removed since `parents` was computed; [`Acls`] relinks before
    /// any mutator returns.
    stale: bool,
}

impl PrefixIndex {
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.keys.binary_search_by(|k| (**k).cmp(name))
    }

    fn insert(&mut self, binding: Arc<AclBinding>) {
        match self.find(&binding.pattern.name) {
            Ok(at) => self.buckets[at].insert(binding),
            Err(at) => {
                let key = binding.pattern.name.as_str().into();
                let mut bucket = Bucket::default();
                bucket.insert(binding);
                self.keys.insert(at, key);
                self.parents.insert(at, None);
                self.buckets.insert(at, bucket);
                self.stale = true;
            }
        }
    }

    fn remove(&mut self, name: &str, binding: &AclBinding) {
        if let Ok(at) = self.find(name) {
            self.buckets[at].remove(binding);
            if self.buckets[at].is_empty() {
                self.keys.remove(at);
                self.parents.remove(at);
                self.buckets.remove(at);
                self.stale = true;
            }
        }
    }

    /// Recomputes the parent links, O(n): in sorted order, every key between a key and
    /// a longer key it prefixes starts with it too, so a stack of the current key's
    /// prefixes is all it takes.
    fn relink(&mut self) {
        if !self.stale {
            return;
        }
        let mut stack: Vec<usize> = Vec::new();
        for at in 0..self.keys.len() {
            while let Some(&top) = stack.last() {
                if self.keys[at].starts_with(&*self.keys[top]) {
                    break;
                }
                stack.pop();
            }
            self.parents[at] = stack.last().copied();
            stack.push(at);
        }
        self.stale = false;
    }

    /// The index of the longest key that is a prefix of `name`.
    ///
    /// Let `k` be the greatest key not above `name`. A key that prefixes `name` sorts
    /// at or below `name`, hence at or below `k`; and every string sorting between a
    /// prefix of `name` and `name` starts with that prefix, `k` included. So the keys
    /// that prefix `name` are exactly the prefixes of `k` no longer than the common
    /// prefix of `k` and `name`, and `k`'s parent chain lists `k`'s prefixes longest
    /// first: the first one short enough (or `k` itself) is the answer.
    fn longest_prefix_of(&self, name: &str) -> Option<usize> {
        debug_assert!(!self.stale, "prefix links used before relink");
        let below = self.keys.partition_point(|k| **k <= *name);
        let mut at = below.checked_sub(1)?;
        let key = self.keys.get(at)?;
        if name.starts_with(&**key) {
            return Some(at);
        }
        let common = key
            .bytes()
            .zip(name.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        loop {
            at = (*self.parents.get(at)?)?;
            if self.keys.get(at)?.len() <= common {
                return Some(at);
            }
        }
    }
}

/// The patterns of one resource type.
#[derive(Debug, Clone, Default)]
struct TypeIndex {
    /// Literal names other than `*`.
    literal: HashMap<Box<str>, Bucket>,
    /// The literal `*` pattern.
    wildcard: Bucket,
    /// Prefixed names.
    prefixed: PrefixIndex,
}

impl TypeIndex {
    fn insert(&mut self, binding: Arc<AclBinding>) {
        let name = binding.pattern.name.as_str();
        match binding.pattern.pattern_type {
            PatternType::Literal if name == WILDCARD_RESOURCE => self.wildcard.insert(binding),
            PatternType::Literal => self.literal.entry(name.into()).or_default().insert(binding),
            PatternType::Prefixed => self.prefixed.insert(binding),
            // Validation admits only Literal and Prefixed into the set.
            _ => {}
        }
    }

    fn remove(&mut self, binding: &AclBinding) {
        let name = binding.pattern.name.as_str();
        match binding.pattern.pattern_type {
            PatternType::Literal if name == WILDCARD_RESOURCE => self.wildcard.remove(binding),
            PatternType::Literal => {
                if let Some(bucket) = self.literal.get_mut(name) {
                    bucket.remove(binding);
                    if bucket.is_empty() {
                        self.literal.remove(name);
                    }
                }
            }
            PatternType::Prefixed => self.prefixed.remove(name, binding),
            _ => {}
        }
    }
}

/// The buckets of every pattern that applies to one resource: its literal name, the
/// literal `*`, then the prefixed patterns that prefix the name, longest first.
#[derive(Debug)]
pub(crate) struct Applicable<'a> {
    literal: Option<&'a Bucket>,
    wildcard: Option<&'a Bucket>,
    prefixed: Option<&'a PrefixIndex>,
    /// The next prefixed pattern to yield.
    next_prefixed: Option<usize>,
}

impl<'a> Iterator for Applicable<'a> {
    type Item = &'a Bucket;

    fn next(&mut self) -> Option<&'a Bucket> {
        if let Some(b) = self.literal.take() {
            return Some(b);
        }
        if let Some(b) = self.wildcard.take() {
            return Some(b);
        }
        let prefixed = self.prefixed?;
        let at = self.next_prefixed?;
        self.next_prefixed = prefixed.parents.get(at).copied().flatten();
        prefixed.buckets.get(at)
    }
}

/// A set of ACL bindings, indexed for [`Authorizer`](crate::Authorizer).
///
/// Changes (CreateAcls, DeleteAcls, replaying the controller's state) are rare and may
/// cost O(n); reads on the request path are O(log n). The broker is expected to clone
/// the set, change the clone and swap it in, so readers never wait.
///
/// Serialized as the list of bindings in their sorted order, so every controller voter
/// holding the same set writes the same bytes. Deserializing validates every binding
/// and drops duplicates.
#[derive(Debug, Clone, Default)]
pub struct Acls {
    all: BTreeSet<Arc<AclBinding>>,
    /// Indexed by [`slot`].
    types: [TypeIndex; 5],
    /// Every binding of each principal (`User:*` included), for
    /// [`Authorizer::authorize_by_resource_type`](crate::Authorizer::authorize_by_resource_type).
    by_principal: HashMap<Box<str>, Vec<Entry>>,
}

/// The index slot of a resource type that can have ACLs.
fn slot(resource_type: ResourceType) -> Option<usize> {
    match resource_type {
        ResourceType::Topic => Some(0),
        ResourceType::Group => Some(1),
        ResourceType::Cluster => Some(2),
        ResourceType::TransactionalId => Some(3),
        ResourceType::DelegationToken => Some(4),
        ResourceType::Unknown | ResourceType::Any => None,
    }
}

impl Acls {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set of these bindings (duplicates dropped), or the first invalid binding's
    /// error.
    pub fn from_bindings(
        bindings: impl IntoIterator<Item = AclBinding>,
    ) -> Result<Self, InvalidAcl> {
        let mut acls = Self::new();
        for binding in bindings {
            // Relinking prefixes is O(n) per new prefix: once at the end is enough.
            acls.insert(binding)?;
        }
        acls.relink();
        Ok(acls)
    }

    /// The number of bindings.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// Whether there are no bindings.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Whether this exact binding is in the set.
    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.all.contains(binding)
    }

    /// Every binding, in order.
    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.all.iter().map(|b| &**b)
    }

    /// Adds a binding after [`AclBinding::validate`]. `Ok(false)` if it was already
    /// there: creating an existing ACL succeeds and changes nothing, as in Kafka.
    pub fn add(&mut self, binding: AclBinding) -> Result<bool, InvalidAcl> {
        let added = self.insert(binding)?;
        self.relink();
        Ok(added)
    }

    /// [`add`](Self::add) without relinking the prefix index.
    fn insert(&mut self, binding: AclBinding) -> Result<bool, InvalidAcl> {
        binding.validate()?;
        if self.all.contains(&binding) {
            return Ok(false);
        }
        let Some(slot) = slot(binding.pattern.resource_type) else {
            return Err(InvalidAcl::ResourceType(binding.pattern.resource_type));
        };
        let binding = Arc::new(binding);
        self.types[slot].insert(Arc::clone(&binding));
        self.by_principal
            .entry(binding.entry.principal.as_str().into())
            .or_default()
            .push(Entry::new(Arc::clone(&binding)));
        self.all.insert(binding);
        Ok(true)
    }

    /// Removes one binding; whether it was there.
    pub fn remove(&mut self, binding: &AclBinding) -> bool {
        let Some(stored) = self.all.take(binding) else {
            return false;
        };
        self.unindex(&stored);
        self.relink();
        true
    }

    /// Brings every prefix index's links up to date; every mutator ends with this.
    fn relink(&mut self) {
        for index in &mut self.types {
            index.prefixed.relink();
        }
    }

    fn unindex(&mut self, binding: &Arc<AclBinding>) {
        if let Some(slot) = slot(binding.pattern.resource_type) {
            self.types[slot].remove(binding);
        }
        let principal = binding.entry.principal.as_str();
        if let Some(list) = self.by_principal.get_mut(principal) {
            list.retain(|e| !Arc::ptr_eq(&e.binding, binding));
            if list.is_empty() {
                self.by_principal.remove(principal);
            }
        }
    }

    /// Removes every binding the filter matches and returns them, in order (DeleteAcls).
    pub fn remove_matching(&mut self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let doomed: Vec<Arc<AclBinding>> = self
            .all
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect();
        for binding in &doomed {
            self.all.remove(binding);
            self.unindex(binding);
        }
        self.relink();
        doomed.into_iter().map(Arc::unwrap_or_clone).collect()
    }

    /// The bindings the filter matches, in order (DescribeAcls).
    pub fn list(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.iter().filter(|b| filter.matches(b)).cloned().collect()
    }

    /// The buckets of every pattern that applies to the named resource.
    pub(crate) fn applicable(&self, resource_type: ResourceType, name: &str) -> Applicable<'_> {
        let Some(index) = slot(resource_type).map(|s| &self.types[s]) else {
            return Applicable {
                literal: None,
                wildcard: None,
                prefixed: None,
                next_prefixed: None,
            };
        };
        Applicable {
            literal: index.literal.get(name),
            wildcard: (!index.wildcard.is_empty()).then_some(&index.wildcard),
            prefixed: Some(&index.prefixed),
            next_prefixed: index.prefixed.longest_prefix_of(name),
        }
    }

    /// Every binding whose principal is exactly `principal`.
    pub(crate) fn of_principal(&self, principal: &str) -> &[Entry] {
        self.by_principal.get(principal).map_or(&[], Vec::as_slice)
    }
}

impl PartialEq for Acls {
    fn eq(&self, other: &Self) -> bool {
        self.all == other.all
    }
}

impl Eq for Acls {}

impl Serialize for Acls {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Acls {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bindings = Vec::<AclBinding>::deserialize(deserializer)?;
        Acls::from_bindings(bindings).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::{AccessControlEntry, ResourcePattern};
    use crate::types::{Operation, Principal};

    fn acl(pattern: ResourcePattern, principal: &str) -> AclBinding {
        AclBinding::new(
            pattern,
            AccessControlEntry::allow(Principal::new(principal).unwrap(), Operation::Read),
        )
    }

    fn topic_prefix(name: &str) -> AclBinding {
        acl(
            ResourcePattern::prefixed(ResourceType::Topic, name),
            "User:a",
        )
    }

    /// The names of the patterns whose buckets `applicable` yields, in order.
    fn applicable_names(acls: &Acls, name: &str) -> Vec<String> {
        acls.applicable(ResourceType::Topic, name)
            .map(|bucket| {
                let e = bucket
                    .any_principal
                    .first()
                    .or(bucket.by_principal.first())
                    .unwrap();
                let p = &e.binding.pattern;
                format!(
                    "{}:{}",
                    if p.pattern_type == PatternType::Literal {
                        "L"
                    } else {
                        "P"
                    },
                    p.name
                )
            })
            .collect()
    }

    #[test]
    fn add_is_idempotent_and_validates() {
        let mut acls = Acls::new();
        let b = acl(ResourcePattern::literal(ResourceType::Topic, "t"), "User:a");
        assert_eq!(acls.add(b.clone()), Ok(true));
        assert_eq!(acls.add(b.clone()), Ok(false));
        assert_eq!(acls.len(), 1);
        assert!(acls.contains(&b));
        let bad = acl(
            ResourcePattern::new(ResourceType::Topic, "t", PatternType::Match),
            "User:a",
        );
        assert_eq!(
            acls.add(bad),
            Err(InvalidAcl::PatternType(PatternType::Match))
        );
        assert_eq!(acls.len(), 1);
        assert!(acls.remove(&b));
        assert!(!acls.remove(&b));
        assert!(acls.is_empty());
        assert_eq!(acls.applicable(ResourceType::Topic, "t").count(), 0);
        assert!(acls.of_principal("User:a").is_empty());
    }

    #[test]
    fn applicable_finds_every_pattern() {
        let mut acls = Acls::new();
        for name in ["a", "ab", "abc", "abd", "b", "abcdef", "ac", "x"] {
            acls.add(topic_prefix(name)).unwrap();
        }
        acls.add(acl(
            ResourcePattern::literal(ResourceType::Topic, "abcd"),
            "User:a",
        ))
        .unwrap();
        acls.add(acl(
            ResourcePattern::literal(ResourceType::Topic, "*"),
            "User:*",
        ))
        .unwrap();
        acls.add(acl(
            ResourcePattern::literal(ResourceType::Group, "abcd"),
            "User:a",
        ))
        .unwrap();
        assert_eq!(
            applicable_names(&acls, "abcd"),
            ["L:abcd", "L:*", "P:abc", "P:ab", "P:a"]
        );
        assert_eq!(
            applicable_names(&acls, "abcdef"),
            ["L:*", "P:abcdef", "P:abc", "P:ab", "P:a"]
        );
        assert_eq!(applicable_names(&acls, "abz"), ["L:*", "P:ab", "P:a"]);
        assert_eq!(applicable_names(&acls, "a"), ["L:*", "P:a"]);
        assert_eq!(applicable_names(&acls, "zzz"), ["L:*"]);
        assert_eq!(applicable_names(&acls, "*"), ["L:*"]);
        assert_eq!(acls.applicable(ResourceType::Cluster, "abcd").count(), 0);
        assert_eq!(acls.applicable(ResourceType::Any, "abcd").count(), 0);
    }

    #[test]
    fn prefix_walk_matches_a_linear_scan() {
        // Dense, adversarial keys: every string over {a, b, é} up to length 4.
        let alphabet = ["a", "b", "é"];
        let mut keys = vec![String::new()];
        let mut all = Vec::new();
        for _ in 0..4 {
            keys = keys
                .iter()
                .flat_map(|k| alphabet.iter().map(move |c| format!("{k}{c}")))
                .collect();
            all.extend(keys.iter().cloned());
        }
        // Every third key, so some prefixes are missing.
        let present: Vec<&String> = all.iter().step_by(3).collect();
        let mut acls = Acls::new();
        for k in &present {
            acls.add(topic_prefix(k)).unwrap();
        }
        for name in all
            .iter()
            .chain(["bbbbb".to_owned(), "éa".to_owned()].iter())
        {
            let mut expected: Vec<String> = present
                .iter()
                .filter(|k| name.starts_with(k.as_str()))
                .map(|k| format!("P:{k}"))
                .collect();
            expected.sort_by_key(|k| std::cmp::Reverse(k.len()));
            assert_eq!(applicable_names(&acls, name), expected, "{name}");
        }
    }

    #[test]
    fn prefix_links_follow_removals() {
        let mut acls = Acls::new();
        for name in ["a", "ab", "abc", "abd"] {
            acls.add(topic_prefix(name)).unwrap();
        }
        assert_eq!(applicable_names(&acls, "abcd"), ["P:abc", "P:ab", "P:a"]);
        assert_eq!(applicable_names(&acls, "abz"), ["P:ab", "P:a"]);
        assert!(acls.remove(&topic_prefix("ab")));
        assert_eq!(applicable_names(&acls, "abcd"), ["P:abc", "P:a"]);
        assert_eq!(applicable_names(&acls, "abz"), ["P:a"]);
        let mut a_only = AclBindingFilter::ANY;
        a_only.pattern.name = Some("a".into());
        assert_eq!(acls.remove_matching(&a_only).len(), 1);
        assert_eq!(applicable_names(&acls, "abcd"), ["P:abc"]);
        assert_eq!(applicable_names(&acls, "abdd"), ["P:abd"]);
        acls.add(topic_prefix("ab")).unwrap();
        assert_eq!(applicable_names(&acls, "abdd"), ["P:abd", "P:ab"]);
    }

    #[test]
    fn buckets_separate_principals() {
        let mut acls = Acls::new();
        let t = || ResourcePattern::literal(ResourceType::Topic, "t");
        for p in ["User:c", "User:a", "User:*", "User:b", "User:a2"] {
            acls.add(acl(t(), p)).unwrap();
        }
        let mut write = acl(t(), "User:a");
        write.entry.operation = Operation::Write;
        acls.add(write).unwrap();
        let bucket = acls.applicable(ResourceType::Topic, "t").next().unwrap();
        let seen = |p: &str| -> Vec<String> {
            bucket
                .candidates(p)
                .map(|e| {
                    format!(
                        "{}/{}",
                        e.binding.entry.principal, e.binding.entry.operation
                    )
                })
                .collect()
        };
        assert_eq!(
            seen("User:a"),
            ["User:*/Read", "User:a/Read", "User:a/Write"]
        );
        assert_eq!(seen("User:b"), ["User:*/Read", "User:b/Read"]);
        assert_eq!(seen("User:z"), ["User:*/Read"]);
        assert_eq!(seen("User:*"), ["User:*/Read"]);
    }

    #[test]
    fn remove_matching_and_list_are_ordered() {
        let mut acls = Acls::new();
        let bindings = [
            acl(ResourcePattern::literal(ResourceType::Topic, "b"), "User:x"),
            acl(
                ResourcePattern::prefixed(ResourceType::Topic, "a"),
                "User:x",
            ),
            acl(ResourcePattern::literal(ResourceType::Topic, "a"), "User:y"),
            acl(ResourcePattern::literal(ResourceType::Group, "a"), "User:x"),
        ];
        for b in bindings.iter().rev() {
            acls.add(b.clone()).unwrap();
        }
        let listed = acls.list(&AclBindingFilter::ANY);
        let mut sorted = bindings.to_vec();
        sorted.sort();
        assert_eq!(listed, sorted);
        assert_eq!(
            listed.iter().collect::<Vec<_>>(),
            acls.iter().collect::<Vec<_>>()
        );

        let mut by_x = AclBindingFilter::ANY;
        by_x.entry.principal = Some("User:x".into());
        let removed = acls.remove_matching(&by_x);
        assert_eq!(removed.len(), 3);
        assert!(removed.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(acls.list(&AclBindingFilter::ANY), [bindings[2].clone()]);
        assert!(acls.of_principal("User:x").is_empty());
        assert_eq!(applicable_names(&acls, "a"), ["L:a"]);
        assert_eq!(applicable_names(&acls, "b"), Vec::<String>::new());
        assert!(acls.remove_matching(&by_x).is_empty());
    }

    #[test]
    fn equality_ignores_insertion_order() {
        let a = acl(ResourcePattern::literal(ResourceType::Topic, "a"), "User:x");
        let b = acl(
            ResourcePattern::prefixed(ResourceType::Topic, "b"),
            "User:y",
        );
        let one = Acls::from_bindings([a.clone(), b.clone()]).unwrap();
        let two = Acls::from_bindings([b, a.clone(), a]).unwrap();
        assert_eq!(one, two);
        assert_eq!(two.len(), 2);
    }
}

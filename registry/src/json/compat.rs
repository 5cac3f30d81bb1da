//! Confluent's JSON Schema compatibility rules (its `json.diff` package, STRICT policy,
//! the default): the writer's schema is compared with the reader's, keyword by keyword,
//! and each difference is a [`Change`]; the reader can read the writer's data when every
//! change is one that keeps what the writer accepted acceptable to the reader.
//!
//! `$ref`s are followed (through the references too). A pair of schemas met again while
//! it is being compared is a cycle, assumed compatible; as in Confluent's registry, the
//! comparison is repeated with the pairs found incompatible until that assumption no
//! longer changes the answer. The work is bounded ([`MAX_WORK`], [`MAX_NESTING`]).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::docs::{Docs, addr};
use super::view::{Crit, Facet, Kind, Sch, Side, modern};
use super::write_sorted;

mod change;
mod keywords;

pub(super) use change::Change;
use change::Diff;

/// The most schema pairs one check compares (memoized pairs count once per pass): a
/// bound on the work an untrusted schema can cause, far above real schemas' needs.
pub const MAX_WORK: usize = 100_000;

/// How deep comparisons nest (a property's schema in an object's, a combination's
/// schemas, the next schema a `$ref` leads to): twice [`super::MAX_DEPTH`], for the
/// combinations and `$ref`s between nested schemas. Each level takes about 1.5 KiB of
/// stack (8 KiB unoptimized), well within a Tokio worker's 2 MiB.
pub const MAX_NESTING: usize = 2 * super::MAX_DEPTH;

/// The longest chain of `$ref`s to `$ref`s followed before a schema.
const MAX_REF_HOPS: usize = 32;

type Key = (usize, Facet, Side, usize, Facet, Side);

fn key(o: Sch<'_>, u: Sch<'_>) -> Key {
    (addr(o.v), o.facet, o.side, addr(u.v), u.facet, u.side)
}

fn compatible(diffs: &[Diff]) -> bool {
    diffs.iter().all(|d| d.change.compatible())
}

/// What makes `writer`'s data unreadable with `reader`: Confluent's incompatible changes,
/// each with the JSON path where it is.
pub(super) fn check(writer: &Docs<'_>, reader: &Docs<'_>) -> Result<(), Vec<String>> {
    let diffs = diff(writer, reader).map_err(|e| vec![e])?;
    let problems: Vec<String> = diffs
        .iter()
        .filter(|d| !d.change.compatible())
        .map(Diff::message)
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Every difference between `writer` and `reader`, compatible or not.
pub(super) fn diff<'a>(writer: &Docs<'a>, reader: &Docs<'a>) -> Result<Vec<Diff>, String> {
    let o = Sch {
        v: writer.root.v,
        base: writer.root.base,
        side: Side::Writer,
        facet: Facet::Whole,
    };
    let u = Sch {
        v: reader.root.v,
        base: reader.root.base,
        side: Side::Reader,
        facet: Facet::Whole,
    };
    let mut seed = HashMap::new();
    let mut work = 0;
    loop {
        let mut ctx = Ctx {
            docs: [writer, reader],
            memo: HashMap::new(),
            in_progress: HashSet::new(),
            seed,
            optimistic: false,
            work,
            nesting: 0,
        };
        let diffs = ctx.compare(o, u)?;
        let incompatible: HashMap<Key, Rc<[Diff]>> = ctx
            .memo
            .into_iter()
            .filter(|(_, d)| !compatible(d))
            .collect();
        let settled = incompatible.len() == ctx.seed.len()
            && incompatible.keys().all(|k| ctx.seed.contains_key(k));
        if !ctx.optimistic || settled {
            return Ok(diffs);
        }
        // The incompatible pairs only grow and the work is bounded: this ends.
        seed = incompatible;
        work = ctx.work;
    }
}

/// Refuses `$ref`s that lead nowhere: to nothing in the schema or its references, or
/// round a cycle of `$ref`s with no schema in it (`{"$ref": "#"}`), which no comparison
/// could get through.
pub(super) fn check_refs(docs: &Docs<'_>) -> Result<(), String> {
    let ctx = Ctx {
        docs: [docs, docs],
        memo: HashMap::new(),
        in_progress: HashSet::new(),
        seed: HashMap::new(),
        optimistic: false,
        work: 0,
        nesting: 0,
    };
    for t in &docs.refs {
        let s = Sch {
            v: t.v,
            base: t.base,
            side: Side::Writer,
            facet: Facet::Whole,
        };
        if let Kind::Combined { subs, .. } = ctx.kind(s) {
            for sub in subs.into_iter().filter(|s| s.facet == Facet::Ref) {
                ctx.deref(sub)?;
            }
        } else {
            ctx.deref(s)?;
        }
    }
    Ok(())
}

struct Ctx<'d, 'a> {
    docs: [&'d Docs<'a>; 2],
    /// The differences found for each pair compared, relative to the pair.
    memo: HashMap<Key, Rc<[Diff]>>,
    /// The pairs being compared (a pair met again is a cycle).
    in_progress: HashSet<Key>,
    /// The pairs an earlier pass found incompatible.
    seed: HashMap<Key, Rc<[Diff]>>,
    /// Whether a cycle was assumed compatible in this pass.
    optimistic: bool,
    work: usize,
    nesting: usize,
}

impl<'a> Ctx<'_, 'a> {
    fn docs(&self, s: Sch<'a>) -> &Docs<'a> {
        match s.side {
            Side::Writer => self.docs[0],
            Side::Reader => self.docs[1],
        }
    }

    fn kind(&self, s: Sch<'a>) -> Kind<'a> {
        s.kind(self.docs(s))
    }

    fn child(&self, s: Sch<'a>, v: &'a Value) -> Sch<'a> {
        s.child(self.docs(s), v)
    }

    fn draft_is_modern(&self, s: Sch<'a>) -> bool {
        modern(self.docs(s).draft(s.base))
    }

    /// The schema `s` stands for once its `$ref`s are followed, and what it is.
    fn deref(&self, mut s: Sch<'a>) -> Result<(Sch<'a>, Kind<'a>), String> {
        for _ in 0..MAX_REF_HOPS {
            let kind = self.kind(s);
            let Kind::Ref(r) = kind else {
                return Ok((s, kind));
            };
            let docs = self.docs(s);
            let t = docs.resolve(r, s.base)?;
            s = Sch {
                v: t.v,
                base: t.base,
                side: s.side,
                facet: Facet::Whole,
            };
        }
        Err(format!(
            "more than {MAX_REF_HOPS} $refs in a row lead to no schema (a cycle of $refs?)"
        ))
    }

    /// The differences between `o` (the writer's) and `u` (the reader's), with paths
    /// relative to them.
    fn compare(&mut self, o: Sch<'a>, u: Sch<'a>) -> Result<Vec<Diff>, String> {
        self.work += 1;
        if self.work > MAX_WORK {
            return Err(format!(
                "the schemas are too large to compare (more than {MAX_WORK} schema pairs)"
            ));
        }
        let ((o, ko), (u, ku)) = (self.deref(o)?, self.deref(u)?);
        let k = key(o, u);
        if let Some(d) = self.memo.get(&k) {
            return Ok(d.to_vec());
        }
        if !self.in_progress.insert(k) {
            if let Some(d) = self.seed.get(&k) {
                return Ok(d.to_vec());
            }
            self.optimistic = true;
            return Ok(Vec::new());
        }
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(format!(
                "the schemas nest too deeply to compare (more than {MAX_NESTING} levels)"
            ));
        }
        let diffs = self.compare_types((o, ko), (u, ku))?;
        self.nesting -= 1;
        self.in_progress.remove(&k);
        self.memo.insert(k, diffs.clone().into());
        Ok(diffs)
    }

    fn compare_types(
        &mut self,
        (o, ko): (Sch<'a>, Kind<'a>),
        (u, ku): (Sch<'a>, Kind<'a>),
    ) -> Result<Vec<Diff>, String> {
        // A schema against a combination of schemas: compatible if it is with one of
        // them (the reader's `anyOf`/`oneOf`) or one of them is with it (the writer's
        // `allOf`); a single-schema combination is that schema.
        match (&ko, &ku) {
            (k, Kind::Combined { crit, subs, .. }) if !matches!(k, Kind::Combined { .. }) => {
                if let [one] = subs.as_slice() {
                    let d = self.compare(o, *one)?;
                    if compatible(&d) {
                        return Ok(d);
                    }
                } else if *crit != Crit::All {
                    for s in subs {
                        let mut d = self.compare(o, *s)?;
                        if compatible(&d) {
                            d.push(Diff::here(Change::SumTypeExtended));
                            return Ok(d);
                        }
                    }
                }
            }
            (Kind::Combined { crit, subs, .. }, k) if !matches!(k, Kind::Combined { .. }) => {
                if let [one] = subs.as_slice() {
                    let d = self.compare(*one, u)?;
                    if compatible(&d) {
                        return Ok(d);
                    }
                } else if *crit == Crit::All {
                    for s in subs {
                        let mut d = self.compare(*s, u)?;
                        if compatible(&d) {
                            d.push(Diff::here(Change::ProductTypeNarrowed));
                            return Ok(d);
                        }
                    }
                }
            }
            _ => {}
        }
        if ko.class() != ku.class() {
            // Nothing is written with `false`; anything is read with `true`.
            if matches!(ko, Kind::False) || matches!(ku, Kind::True) {
                return Ok(Vec::new());
            }
            // Kafka Connect's bytes, whichever JSON type carries them (Confluent's
            // exception for its JSON converter's decimals).
            let bytes = |s: Sch<'_>| s.v.get("connect.type") == Some(&Value::from("bytes"));
            if bytes(o) && bytes(u) {
                return Ok(Vec::new());
            }
            return Ok(vec![Diff::here(Change::TypeChanged)]);
        }
        let mut out = Vec::new();
        match (ko, ku) {
            (Kind::String, Kind::String) => keywords::strings(o.v, u.v, &mut out),
            (Kind::Number { integer: a }, Kind::Number { integer: b }) => {
                keywords::numbers(o.v, u.v, &mut out);
                if a && !b {
                    out.push(Diff::here(Change::TypeExtended));
                } else if !a && b {
                    out.push(Diff::here(Change::TypeNarrowed));
                }
            }
            (Kind::Const(a), Kind::Const(b)) if a != b => {
                out.push(Diff::at("const", Change::EnumArrayChanged));
            }
            (Kind::Enum(a), Kind::Enum(b)) => keywords::enums(a, b, &mut out),
            (Kind::Not(a), Kind::Not(b)) => {
                // Reversed: the reader's `not` must exclude no more than the writer's.
                let (a, b) = (self.child(o, a), self.child(u, b));
                let d = self.compare(b, a)?;
                out.push(Diff::at(
                    "not",
                    if compatible(&d) {
                        Change::NotTypeNarrowed
                    } else {
                        Change::NotTypeExtended
                    },
                ));
            }
            (
                Kind::Combined {
                    crit: oc,
                    subs: os,
                    synthetic,
                },
                Kind::Combined {
                    crit: uc, subs: us, ..
                },
            ) => self.combined((oc, os, synthetic), (uc, us), &mut out)?,
            (Kind::Object, Kind::Object) => self.objects(o, u, &mut out)?,
            (Kind::Array, Kind::Array) => self.arrays(o, u, &mut out)?,
            _ => {}
        }
        Ok(out)
    }

    /// Compares `o` and `u` and adds the differences under `path`.
    fn compare_at(
        &mut self,
        path: &str,
        o: Sch<'a>,
        u: Sch<'a>,
        out: &mut Vec<Diff>,
    ) -> Result<bool, String> {
        let d = self.compare(o, u)?;
        let ok = compatible(&d);
        out.extend(d.into_iter().map(|d| d.under(path)));
        Ok(ok)
    }

    fn combined(
        &mut self,
        (oc, os, synthetic): (Crit, Vec<Sch<'a>>, bool),
        (uc, us): (Crit, Vec<Sch<'a>>),
        out: &mut Vec<Diff>,
    ) -> Result<(), String> {
        if oc != uc {
            let single = |s: &[Sch<'_>]| s.len() == 1;
            let extended = uc == Crit::Any
                || (single(&os) && single(&us))
                || (single(&os) && uc == Crit::One)
                || (single(&us) && oc == Crit::All);
            if !extended {
                out.push(Diff::here(Change::CombinedTypeChanged));
                return Ok(());
            }
            out.push(Diff::here(Change::CombinedTypeExtended));
        }
        let (os, us) = (distinct(os), distinct(us));
        if os.len() < us.len() {
            out.push(Diff::here(if uc == Crit::All {
                Change::ProductTypeExtended
            } else {
                Change::SumTypeExtended
            }));
        } else if os.len() > us.len() {
            out.push(Diff::here(if oc == Crit::All {
                Change::ProductTypeNarrowed
            } else {
                Change::SumTypeNarrowed
            }));
        }
        // Which of the reader's schemas each of the writer's is compatible with, and
        // a largest matching of them (one to one).
        // For a schema's facets (its type, its enum, ...), what differs between the
        // writer's facet and the reader's of the same kind, to say why they do not match.
        let mut edges: Vec<Vec<(usize, Vec<Diff>)>> = Vec::with_capacity(os.len());
        let mut same_facet: Vec<Vec<Diff>> = Vec::with_capacity(os.len());
        for (i, a) in os.iter().enumerate() {
            let path = if synthetic {
                String::new()
            } else {
                format!("{}/{i}", oc.keyword())
            };
            let (mut mine, mut why) = (Vec::new(), Vec::new());
            for (j, b) in us.iter().enumerate() {
                let d = self.compare(*a, *b)?;
                let d: Vec<Diff> = d.into_iter().map(|d| d.under(&path)).collect();
                if compatible(&d) {
                    mine.push((j, d));
                } else if a.facet == b.facet && a.facet != Facet::Whole {
                    why = d;
                }
            }
            edges.push(mine);
            same_facet.push(why);
        }
        let adjacency: Vec<Vec<usize>> = edges
            .iter()
            .map(|e| e.iter().map(|(j, _)| *j).collect())
            .collect();
        let matched = max_matching(&adjacency, us.len());
        let mut unmatched = vec![true; os.len()];
        for (j, i) in matched.iter().enumerate() {
            if let Some(i) = *i {
                unmatched[i] = false;
                if let Some((_, d)) = edges[i].iter().find(|(jj, _)| *jj == j) {
                    out.extend(d.iter().cloned());
                }
            }
        }
        let count = unmatched.iter().filter(|u| !**u).count();
        if count < os.len().min(us.len()) {
            out.push(Diff::here(Change::CombinedTypeSubschemasChanged));
            for (i, why) in same_facet.into_iter().enumerate() {
                if unmatched[i] {
                    out.extend(why);
                }
            }
        }
        Ok(())
    }

    /// Whether `s`, as written (no `$ref` followed), is the empty schema.
    fn is_empty(&self, s: Sch<'a>) -> bool {
        matches!(self.kind(s), Kind::True)
    }

    fn objects(&mut self, o: Sch<'a>, u: Sch<'a>, out: &mut Vec<Diff>) -> Result<(), String> {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        let props = |s: Sch<'a>| match s.v.get("properties") {
            Some(Value::Object(m)) => m,
            _ => &*EMPTY,
        };
        let (op, up) = (props(o), props(u));
        let (oreq, ureq) = (keywords::required(o.v), keywords::required(u.v));
        let has_default = |v: &Value| v.get("default").is_some();
        for k in op.keys() {
            if let Some(us) = up.get(k) {
                let (a, b) = (oreq.contains(k.as_str()), ureq.contains(k.as_str()));
                let path = format!("required/{k}");
                if a && !b {
                    out.push(Diff::at(&path, Change::RequiredAttributeRemoved));
                } else if !a && b {
                    out.push(Diff::at(
                        &path,
                        if has_default(us) {
                            Change::RequiredAttributeWithDefaultAdded
                        } else {
                            Change::RequiredAttributeAdded
                        },
                    ));
                }
            }
        }
        let names: BTreeSet<&String> = op.keys().chain(up.keys()).collect();
        for k in names {
            let path = format!("properties/{k}");
            match (op.get(k), up.get(k)) {
                (Some(a), Some(b)) => {
                    let (a, b) = (self.child(o, a), self.child(u, b));
                    self.compare_at(&path, a, b, out)?;
                }
                (Some(a), None) => {
                    let a = self.child(o, a);
                    let change = if keywords::open_object(u.v, |s| self.is_empty(self.child(u, s)))
                    {
                        Change::PropertyRemovedFromOpenContentModel
                    } else if let Some(p) = self.partial_object(u, k) {
                        if self.compare_at(&path, a, p, out)? {
                            Change::PropertyRemovedIsCoveredByPartiallyOpenContentModel
                        } else {
                            Change::PropertyRemovedNotCoveredByPartiallyOpenContentModel
                        }
                    } else if matches!(self.kind(a), Kind::False) {
                        Change::PropertyWithFalseRemovedFromClosedContentModel
                    } else {
                        Change::PropertyRemovedFromClosedContentModel
                    };
                    out.push(Diff::at(&path, change));
                }
                (None, Some(b)) => {
                    let bs = self.child(u, b);
                    let required = ureq.contains(k.as_str());
                    if keywords::open_object(o.v, |s| self.is_empty(self.child(o, s))) {
                        let change = if self.is_empty(bs) {
                            Change::PropertyWithEmptySchemaAddedToOpenContentModel
                        } else if required && has_default(b) {
                            Change::RequiredPropertyWithDefaultAddedToOpenContentModel
                        } else if required {
                            Change::RequiredPropertyAddedToOpenContentModel
                        } else {
                            Change::OptionalPropertyAddedToOpenContentModel
                        };
                        out.push(Diff::at(&path, change));
                    } else {
                        if let Some(p) = self.partial_object(o, k) {
                            let change = if self.compare_at(&path, p, bs, out)? {
                                Change::PropertyAddedIsCoveredByPartiallyOpenContentModel
                            } else {
                                Change::PropertyAddedNotCoveredByPartiallyOpenContentModel
                            };
                            out.push(Diff::at(&path, change));
                        }
                        out.push(Diff::at(
                            &path,
                            if required && has_default(b) {
                                Change::RequiredPropertyWithDefaultAddedToUnopenContentModel
                            } else if required {
                                Change::RequiredPropertyAddedToUnopenContentModel
                            } else {
                                Change::OptionalPropertyAddedToUnopenContentModel
                            },
                        ));
                    }
                }
                (None, None) => {}
            }
        }
        self.dependencies(o, u, out)?;
        let (oa, ua) = (
            keywords::additional(o.v, "additionalProperties"),
            keywords::additional(u.v, "additionalProperties"),
        );
        self.additional("additionalProperties", (o, oa), (u, ua), true, out)?;
        self.unevaluated("unevaluatedProperties", o, u, true, out)?;
        keywords::bound(o.v, u.v, "maxProperties", out);
        keywords::bound(o.v, u.v, "minProperties", out);
        Ok(())
    }

    /// The schema a partially open object takes `name` with: a matching
    /// `patternProperties`, else `additionalProperties`, else `unevaluatedProperties`.
    fn partial_object(&self, s: Sch<'a>, name: &str) -> Option<Sch<'a>> {
        if let Some(Value::Object(patterns)) = s.v.get("patternProperties") {
            for (p, schema) in patterns {
                if keywords::pattern_matches(p, name) {
                    return Some(self.child(s, schema));
                }
            }
        }
        self.partial(s, s.v.get("additionalProperties"), "unevaluatedProperties")
    }

    /// The schema `additional` is if it is one, else that of `unevaluated` when
    /// `additional` allows anything and it is neither `true`, `false` nor empty.
    fn partial(
        &self,
        s: Sch<'a>,
        additional: Option<&'a Value>,
        unevaluated: &str,
    ) -> Option<Sch<'a>> {
        match additional {
            Some(a @ Value::Object(_)) => return Some(self.child(s, a)),
            Some(Value::Bool(false)) => return None,
            _ => {}
        }
        let u = self.child(s, s.v.get(unevaluated)?);
        (!matches!(self.kind(u), Kind::True | Kind::False)).then_some(u)
    }

    fn dependencies(&mut self, o: Sch<'a>, u: Sch<'a>, out: &mut Vec<Diff>) -> Result<(), String> {
        let (od, ud) = (keywords::dependencies(o.v), keywords::dependencies(u.v));
        let names: BTreeSet<&String> = od.0.keys().chain(ud.0.keys()).collect();
        for k in names {
            let path = format!("dependencies/{k}");
            let change = match (od.0.get(k), ud.0.get(k)) {
                (Some(_), None) => Change::DependencyArrayRemoved,
                (None, Some(_)) => Change::DependencyArrayAdded,
                (Some(a), Some(b)) if a == b => continue,
                (Some(a), Some(b)) if a.is_subset(b) => Change::DependencyArrayExtended,
                (Some(a), Some(b)) if b.is_subset(a) => Change::DependencyArrayNarrowed,
                (Some(_), Some(_)) => Change::DependencyArrayChanged,
                (None, None) => continue,
            };
            out.push(Diff::at(&path, change));
        }
        let names: BTreeSet<&String> = od.1.keys().chain(ud.1.keys()).collect();
        for k in names {
            let path = format!("dependencies/{k}");
            match (od.1.get(k), ud.1.get(k)) {
                (Some(_), None) => out.push(Diff::at(&path, Change::DependencySchemaRemoved)),
                (None, Some(_)) => out.push(Diff::at(&path, Change::DependencySchemaAdded)),
                (Some(a), Some(b)) => {
                    let (a, b) = (self.child(o, a), self.child(u, b));
                    self.compare_at(&path, a, b, out)?;
                }
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// `additionalProperties` or `additionalItems`: whether more are allowed, and the
    /// schema they take.
    fn additional(
        &mut self,
        keyword: &str,
        (o, (op, os)): (Sch<'a>, (bool, Option<&'a Value>)),
        (u, (up, us)): (Sch<'a>, (bool, Option<&'a Value>)),
        properties: bool,
        out: &mut Vec<Diff>,
    ) -> Result<(), String> {
        use Change::*;
        let change = match (os, us) {
            _ if op != up => match (properties, up) {
                (true, true) => AdditionalPropertiesAdded,
                (true, false) => AdditionalPropertiesRemoved,
                (false, true) => AdditionalItemsAdded,
                (false, false) => AdditionalItemsRemoved,
            },
            (None, Some(_)) if properties => AdditionalPropertiesNarrowed,
            (None, Some(_)) => AdditionalItemsNarrowed,
            (Some(_), None) if properties => AdditionalPropertiesExtended,
            (Some(_), None) => AdditionalItemsExtended,
            (Some(a), Some(b)) => {
                let (a, b) = (self.child(o, a), self.child(u, b));
                self.compare_at(keyword, a, b, out)?;
                return Ok(());
            }
            (None, None) => return Ok(()),
        };
        out.push(Diff::at(keyword, change));
        Ok(())
    }

    /// `unevaluatedProperties` or `unevaluatedItems`.
    fn unevaluated(
        &mut self,
        keyword: &str,
        o: Sch<'a>,
        u: Sch<'a>,
        properties: bool,
        out: &mut Vec<Diff>,
    ) -> Result<(), String> {
        use Change::*;
        let (ov, uv) = (o.v.get(keyword), u.v.get(keyword));
        let class = |s: Sch<'a>, v: Option<&'a Value>| {
            v.map(|v| {
                let c = self.child(s, v);
                (c, self.kind(c).class())
            })
        };
        let (oc, uc) = (class(o, ov), class(u, uv));
        let (f, t) = (Kind::False.class(), Kind::True.class());
        let [added, removed, extended, narrowed] = if properties {
            [
                UnevaluatedPropertiesAdded,
                UnevaluatedPropertiesRemoved,
                UnevaluatedPropertiesExtended,
                UnevaluatedPropertiesNarrowed,
            ]
        } else {
            [
                UnevaluatedItemsAdded,
                UnevaluatedItemsRemoved,
                UnevaluatedItemsExtended,
                UnevaluatedItemsNarrowed,
            ]
        };
        let change = match (oc, uc) {
            (None, None) => return Ok(()),
            (None, Some((_, c))) => {
                if c == f {
                    removed
                } else {
                    narrowed
                }
            }
            (Some((_, c)), None) => {
                if c == f {
                    added
                } else {
                    extended
                }
            }
            (Some((_, a)), Some((_, b))) if a == f && b != f => added,
            (Some((_, a)), Some((_, b))) if a != f && b == f => removed,
            (Some((_, a)), Some((_, b))) if a == t && b != t => narrowed,
            (Some((_, a)), Some((_, b))) if a != t && b == t => extended,
            (Some((a, _)), Some((b, _))) => {
                self.compare_at(keyword, a, b, out)?;
                return Ok(());
            }
        };
        out.push(Diff::at(keyword, change));
        Ok(())
    }

    fn arrays(&mut self, o: Sch<'a>, u: Sch<'a>, out: &mut Vec<Diff>) -> Result<(), String> {
        let (om, um) = (self.draft_is_modern(o), self.draft_is_modern(u));
        let (ol, ul) = (keywords::items(o.v, om), keywords::items(u.v, um));
        match (ol.all, ul.all) {
            (None, Some(_)) => out.push(Diff::at("items", Change::SchemaAdded)),
            (Some(_), None) => out.push(Diff::at("items", Change::SchemaRemoved)),
            (Some(a), Some(b)) => {
                let (a, b) = (self.child(o, a), self.child(u, b));
                self.compare_at("items", a, b, out)?;
            }
            (None, None) => {}
        }
        let open = |ctx: &Self, s: Sch<'a>, l: &keywords::Items<'a>| {
            keywords::open_items(s.v, l, |v| ctx.is_empty(ctx.child(s, v)))
        };
        let tuple = |ctx: &Self, s: Sch<'a>, l: &keywords::Items<'a>| {
            ctx.partial(s, l.rest, "unevaluatedItems")
        };
        let n = ol.tuple.len().max(ul.tuple.len());
        for i in 0..n {
            let path = format!("{}/{i}", ol.tuple_keyword);
            match (ol.tuple.get(i), ul.tuple.get(i)) {
                (Some(a), Some(b)) => {
                    let (a, b) = (self.child(o, a), self.child(u, b));
                    self.compare_at(&path, a, b, out)?;
                }
                (Some(a), None) => {
                    let a = self.child(o, a);
                    let change = if open(self, u, &ul) {
                        Change::ItemRemovedFromOpenContentModel
                    } else if let Some(p) = tuple(self, u, &ul) {
                        if self.compare_at(&path, a, p, out)? {
                            Change::ItemRemovedIsCoveredByPartiallyOpenContentModel
                        } else {
                            Change::ItemRemovedNotCoveredByPartiallyOpenContentModel
                        }
                    } else if matches!(self.kind(a), Kind::False) {
                        Change::ItemWithFalseRemovedFromClosedContentModel
                    } else {
                        Change::ItemRemovedFromClosedContentModel
                    };
                    out.push(Diff::at(&path, change));
                }
                (None, Some(b)) => {
                    let b = self.child(u, b);
                    let change = if open(self, o, &ol) {
                        if self.is_empty(b) {
                            Change::ItemWithEmptySchemaAddedToOpenContentModel
                        } else {
                            Change::ItemAddedToOpenContentModel
                        }
                    } else if let Some(p) = tuple(self, o, &ol) {
                        if self.compare_at(&path, p, b, out)? {
                            Change::ItemAddedIsCoveredByPartiallyOpenContentModel
                        } else {
                            Change::ItemAddedNotCoveredByPartiallyOpenContentModel
                        }
                    } else {
                        Change::ItemAddedToClosedContentModel
                    };
                    out.push(Diff::at(&path, change));
                }
                (None, None) => {}
            }
        }
        let (oa, ua) = (keywords::rest(ol.rest), keywords::rest(ul.rest));
        self.additional(ol.rest_keyword, (o, oa), (u, ua), false, out)?;
        self.unevaluated("unevaluatedItems", o, u, false, out)?;
        keywords::bound(o.v, u.v, "maxItems", out);
        keywords::bound(o.v, u.v, "minItems", out);
        keywords::bound(o.v, u.v, "maxContains", out);
        keywords::bound(o.v, u.v, "minContains", out);
        let unique = |v: &Value| v.get("uniqueItems") == Some(&Value::Bool(true));
        match (unique(o.v), unique(u.v)) {
            (true, false) => out.push(Diff::at("uniqueItems", Change::UniqueItemsRemoved)),
            (false, true) => out.push(Diff::at("uniqueItems", Change::UniqueItemsAdded)),
            _ => {}
        }
        Ok(())
    }
}

/// `subs` without repeats (the same JSON for the same facet), in order.
fn distinct(subs: Vec<Sch<'_>>) -> Vec<Sch<'_>> {
    let mut seen = HashSet::new();
    subs.into_iter()
        .filter(|s| {
            let mut text = String::new();
            write_sorted(s.v, &mut text);
            seen.insert((text, s.facet))
        })
        .collect()
}

/// A largest one-to-one matching in a bipartite graph (left `i` to right `edges[i][..]`),
/// by augmenting paths found breadth first (no recursion): each right's left, if any.
fn max_matching(edges: &[Vec<usize>], right: usize) -> Vec<Option<usize>> {
    let mut owner: Vec<Option<usize>> = vec![None; right];
    for start in 0..edges.len() {
        let mut reached_by: Vec<Option<usize>> = vec![None; edges.len()];
        let mut from: Vec<usize> = vec![usize::MAX; right];
        let mut seen_left = vec![false; edges.len()];
        let mut seen_right = vec![false; right];
        seen_left[start] = true;
        let mut queue = VecDeque::from([start]);
        let mut free = None;
        'search: while let Some(i) = queue.pop_front() {
            for &j in &edges[i] {
                if seen_right[j] {
                    continue;
                }
                seen_right[j] = true;
                from[j] = i;
                match owner[j] {
                    None => {
                        free = Some(j);
                        break 'search;
                    }
                    Some(next) if !seen_left[next] => {
                        seen_left[next] = true;
                        reached_by[next] = Some(j);
                        queue.push_back(next);
                    }
                    Some(_) => {}
                }
            }
        }
        let Some(mut j) = free else { continue };
        loop {
            let i = from[j];
            owner[j] = Some(i);
            match reached_by[i] {
                Some(prev) => j = prev,
                None => break,
            }
        }
    }
    owner
}

#[cfg(test)]
mod tests {
    use super::max_matching;

    #[test]
    fn matching_finds_augmenting_paths() {
        // 0 can take a or b, 1 only a: the greedy 0-a must give way.
        let m = max_matching(&[vec![0, 1], vec![0]], 2);
        assert_eq!(m, [Some(1), Some(0)]);
        // Two lefts wanting one right: one match.
        let m = max_matching(&[vec![0], vec![0]], 1);
        assert_eq!(m.iter().flatten().count(), 1);
    }
}

//! Confluent's Protobuf compatibility rules (its `protobuf.diff` package), on compiled
//! descriptors: the writer's file (what the data was written with) against the reader's.
//! Messages are matched by name, top-level and nested, fields by number; the changes
//! that break a reader are reported, the ones Confluent takes are not (a field or
//! message added, a field removed or renamed, enum changes, a message moved, a field
//! moved out of its oneof, a string field's label changed).
//!
//! Messages of the schema's own file are all compared; a message of an imported file is
//! compared when a field of a compared message uses it. The walk keeps a queue, not the
//! stack, so a long chain of referenced messages cannot overflow it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use prost_reflect::{
    Cardinality, FieldDescriptor, FileDescriptor, Kind, MessageDescriptor, Syntax,
};

/// A change that breaks a reader, with Confluent's name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    PackageChanged,
    MessageRemoved,
    FieldKindChanged,
    FieldScalarKindChanged,
    FieldNamedTypeChanged,
    FieldNumericLabelChanged,
    RequiredFieldAdded,
    RequiredFieldRemoved,
    OneofFieldRemoved,
    MultipleFieldsMovedToOneof,
    FieldMovedToExistingOneof,
}

impl Change {
    pub fn name(self) -> &'static str {
        match self {
            Change::PackageChanged => "PACKAGE_CHANGED",
            Change::MessageRemoved => "MESSAGE_REMOVED",
            Change::FieldKindChanged => "FIELD_KIND_CHANGED",
            Change::FieldScalarKindChanged => "FIELD_SCALAR_KIND_CHANGED",
            Change::FieldNamedTypeChanged => "FIELD_NAMED_TYPE_CHANGED",
            Change::FieldNumericLabelChanged => "FIELD_NUMERIC_LABEL_CHANGED",
            Change::RequiredFieldAdded => "REQUIRED_FIELD_ADDED",
            Change::RequiredFieldRemoved => "REQUIRED_FIELD_REMOVED",
            Change::OneofFieldRemoved => "ONEOF_FIELD_REMOVED",
            Change::MultipleFieldsMovedToOneof => "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
            Change::FieldMovedToExistingOneof => "FIELD_MOVED_TO_EXISTING_ONEOF",
        }
    }
}

/// One breaking change: what, where (Confluent's path: `#/` then message names, oneof
/// names and field numbers), and in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub change: Change,
    pub path: String,
    pub detail: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at '{}': {}",
            self.change.name(),
            self.path,
            self.detail
        )
    }
}

/// The breaking changes from `writer` to `reader`; empty if the reader reads the
/// writer's data.
pub fn differences(writer: &FileDescriptor, reader: &FileDescriptor) -> Vec<Difference> {
    let mut walk = Walk {
        writer_file: writer.name().to_string(),
        reader_file: reader.name().to_string(),
        out: Vec::new(),
        queue: Vec::new(),
        seen: HashSet::new(),
    };
    if writer.package_name() != reader.package_name() {
        walk.add(
            Change::PackageChanged,
            "#/".into(),
            format!(
                "the package is '{}' in the writer's schema, '{}' in the reader's",
                writer.package_name(),
                reader.package_name()
            ),
        );
    }
    walk.types(writer.messages(), reader.messages(), "#");
    while let Some((w, r)) = walk.queue.pop() {
        let path = format!("#/{}", local_name(&w).replace('.', "/"));
        walk.message(&w, &r, &path);
        walk.types(w.child_messages(), r.child_messages(), &path);
    }
    walk.out
}

struct Walk {
    writer_file: String,
    reader_file: String,
    out: Vec<Difference>,
    /// Imported messages still to compare (writer's, reader's).
    queue: Vec<(MessageDescriptor, MessageDescriptor)>,
    /// Pairs already queued, by full names: messages may refer to each other.
    seen: HashSet<(String, String)>,
}

/// What a field holds, in the groups Confluent compares.
enum Shape {
    Scalar(Scalar, String),
    Message(MessageDescriptor),
    Map(Box<Shape>, Box<Shape>),
}

/// Scalars whose encodings read as one another (proto3's "updating a message type"):
/// a change within a group keeps the wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scalar {
    /// int32, int64, uint32, uint64, bool and enums: varints.
    Varint,
    /// sint32, sint64: zigzag varints.
    Zigzag,
    StringOrBytes,
    Fixed32,
    Fixed64,
    Float,
    Double,
}

/// A field's label as Confluent's parser sees it: none for a oneof member or a proto3
/// field without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Optional,
    Required,
    Repeated,
}

impl Walk {
    fn add(&mut self, change: Change, path: String, detail: String) {
        self.out.push(Difference {
            change,
            path,
            detail,
        });
    }

    /// Messages at one level (a file's top level or one message's nested ones), by name.
    fn types(
        &mut self,
        writer: impl Iterator<Item = MessageDescriptor>,
        reader: impl Iterator<Item = MessageDescriptor>,
        path: &str,
    ) {
        // Map entries are not declared types: a map field's change is the field's.
        let by_name = |it: &mut dyn Iterator<Item = MessageDescriptor>| {
            it.filter(|m| !m.is_map_entry())
                .map(|m| (m.name().to_string(), m))
                .collect::<BTreeMap<_, _>>()
        };
        let (mut writer, mut reader) = (writer, reader);
        let w = by_name(&mut writer);
        let r = by_name(&mut reader);
        for (name, wm) in &w {
            let here = format!("{path}/{name}");
            match r.get(name) {
                None => self.add(
                    Change::MessageRemoved,
                    here,
                    format!(
                        "message {} of the writer's schema is missing in the reader's",
                        wm.full_name()
                    ),
                ),
                Some(rm) => {
                    self.message(wm, rm, &here);
                    self.types(wm.child_messages(), rm.child_messages(), &here);
                }
            }
        }
    }

    /// Two versions of one message: its fields by number, and its oneofs.
    fn message(&mut self, w: &MessageDescriptor, r: &MessageDescriptor, path: &str) {
        let wf: BTreeMap<u32, FieldDescriptor> = w.fields().map(|f| (f.number(), f)).collect();
        let rf: BTreeMap<u32, FieldDescriptor> = r.fields().map(|f| (f.number(), f)).collect();
        let w_oneofs = oneofs(w);
        let r_oneofs = oneofs(r);
        // A oneof gone with every member is a deletion of its fields, which is allowed.
        let deleted: HashSet<&str> = w_oneofs
            .iter()
            .filter(|(name, members)| {
                !r_oneofs.contains_key(*name) && members.iter().all(|n| !rf.contains_key(n))
            })
            .map(|(name, _)| name.as_str())
            .collect();
        // Fields that were independent must not become mutually exclusive.
        for (name, members) in &r_oneofs {
            let mut origins = HashSet::new();
            let mut moved_in = 0;
            for n in members {
                if let Some(f) = wf.get(n) {
                    match oneof_of(f) {
                        Some(o) => origins.insert(format!("oneof {o}")),
                        None => {
                            moved_in += 1;
                            origins.insert(format!("field {n}"))
                        }
                    };
                }
            }
            if origins.len() > 1 {
                let (change, what) = if moved_in > 1 {
                    (Change::MultipleFieldsMovedToOneof, "fields that were apart")
                } else {
                    (
                        Change::FieldMovedToExistingOneof,
                        "a field moved into an existing oneof",
                    )
                };
                self.add(
                    change,
                    format!("{path}/{name}"),
                    format!(
                        "oneof {name} of {} in the reader's schema holds {what} in the writer's ({})",
                        r.full_name(),
                        origins.into_iter().collect::<BTreeSet<_>>().into_iter().collect::<Vec<_>>().join(", ")
                    ),
                );
            }
        }
        let numbers: BTreeSet<u32> = wf.keys().chain(rf.keys()).copied().collect();
        for n in numbers {
            match (wf.get(&n), rf.get(&n)) {
                (Some(f), None) => match oneof_of(f) {
                    Some(o) if !deleted.contains(o.as_str()) => self.add(
                        Change::OneofFieldRemoved,
                        format!("{path}/{o}/{n}"),
                        format!(
                            "field {} ({n}) of oneof {o} is missing in the reader's schema",
                            f.name()
                        ),
                    ),
                    Some(_) => {}
                    None if label(f) == Some(Label::Required) => self.add(
                        Change::RequiredFieldRemoved,
                        format!("{path}/{n}"),
                        format!(
                            "required field {} ({n}) of the writer's schema is missing in the reader's",
                            f.name()
                        ),
                    ),
                    None => {}
                },
                (None, Some(f)) => {
                    if oneof_of(f).is_none() && label(f) == Some(Label::Required) {
                        self.add(
                            Change::RequiredFieldAdded,
                            format!("{path}/{n}"),
                            format!(
                                "required field {} ({n}) of the reader's schema is missing in the writer's",
                                f.name()
                            ),
                        );
                    }
                }
                (Some(wf), Some(rf)) => {
                    let here = match oneof_of(rf) {
                        Some(o) => format!("{path}/{o}/{n}"),
                        None => format!("{path}/{n}"),
                    };
                    let what = format!("field {} ({n})", rf.name());
                    self.shapes(
                        label(wf),
                        label(rf),
                        shape(wf),
                        shape(rf),
                        &here,
                        &what,
                    );
                }
                (None, None) => {}
            }
        }
    }

    /// A field's (or a map key's or value's) two types.
    fn shapes(
        &mut self,
        wl: Option<Label>,
        rl: Option<Label>,
        w: Shape,
        r: Shape,
        path: &str,
        what: &str,
    ) {
        match (w, r) {
            (Shape::Scalar(ws, wn), Shape::Scalar(rs, rn)) => {
                if ws != rs {
                    self.add(
                        Change::FieldScalarKindChanged,
                        path.into(),
                        format!(
                            "{what} is {wn} in the writer's schema, {rn} in the reader's (not the same wire encoding)"
                        ),
                    );
                } else if let (Some(wl), Some(rl)) = (wl, rl)
                    && wl != rl
                    && ws != Scalar::StringOrBytes
                {
                    self.add(
                        Change::FieldNumericLabelChanged,
                        path.into(),
                        format!(
                            "{what} is {} in the writer's schema, {} in the reader's",
                            label_name(wl),
                            label_name(rl)
                        ),
                    );
                }
            }
            (Shape::Message(wm), Shape::Message(rm)) => {
                if local_name(&wm) != local_name(&rm) {
                    self.add(
                        Change::FieldNamedTypeChanged,
                        path.into(),
                        format!(
                            "{what} is a {} in the writer's schema, a {} in the reader's",
                            wm.full_name(),
                            rm.full_name()
                        ),
                    );
                } else if (wm.parent_file().name() != self.writer_file
                    || rm.parent_file().name() != self.reader_file)
                    && self
                        .seen
                        .insert((wm.full_name().to_string(), rm.full_name().to_string()))
                {
                    // The schema's own messages are compared by name anyway.
                    self.queue.push((wm, rm));
                }
            }
            (Shape::Map(wk, wv), Shape::Map(rk, rv)) => {
                self.shapes(None, None, *wk, *rk, path, &format!("{what}'s key"));
                self.shapes(None, None, *wv, *rv, path, &format!("{what}'s value"));
            }
            (w, r) => self.add(
                Change::FieldKindChanged,
                path.into(),
                format!(
                    "{what} is a {} in the writer's schema, a {} in the reader's",
                    shape_name(&w),
                    shape_name(&r)
                ),
            ),
        }
    }
}

/// A message's real oneofs (not proto3 `optional`'s synthetic ones) and their numbers.
fn oneofs(m: &MessageDescriptor) -> HashMap<String, Vec<u32>> {
    m.oneofs()
        .filter(|o| !o.is_synthetic())
        .map(|o| {
            (
                o.name().to_string(),
                o.fields().map(|f| f.number()).collect(),
            )
        })
        .collect()
}

fn oneof_of(f: &FieldDescriptor) -> Option<String> {
    f.containing_oneof()
        .filter(|o| !o.is_synthetic())
        .map(|o| o.name().to_string())
}

fn label(f: &FieldDescriptor) -> Option<Label> {
    if oneof_of(f).is_some() {
        return None;
    }
    if f.field_descriptor_proto().proto3_optional() {
        return Some(Label::Optional);
    }
    match (f.cardinality(), f.parent_file().syntax()) {
        (Cardinality::Repeated, _) => Some(Label::Repeated),
        (_, Syntax::Proto3) => None,
        (Cardinality::Required, _) => Some(Label::Required),
        (Cardinality::Optional, _) => Some(Label::Optional),
    }
}

fn label_name(l: Label) -> &'static str {
    match l {
        Label::Optional => "optional",
        Label::Required => "required",
        Label::Repeated => "repeated",
    }
}

fn shape(f: &FieldDescriptor) -> Shape {
    if f.is_map()
        && let Kind::Message(entry) = f.kind()
    {
        return Shape::Map(
            Box::new(shape(&entry.map_entry_key_field())),
            Box::new(shape(&entry.map_entry_value_field())),
        );
    }
    let kind = f.kind();
    let scalar = match &kind {
        Kind::Message(m) => return Shape::Message(m.clone()),
        Kind::Enum(e) => return Shape::Scalar(Scalar::Varint, format!("enum {}", e.full_name())),
        Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 | Kind::Bool => Scalar::Varint,
        Kind::Sint32 | Kind::Sint64 => Scalar::Zigzag,
        Kind::String | Kind::Bytes => Scalar::StringOrBytes,
        Kind::Fixed32 | Kind::Sfixed32 => Scalar::Fixed32,
        Kind::Fixed64 | Kind::Sfixed64 => Scalar::Fixed64,
        Kind::Float => Scalar::Float,
        Kind::Double => Scalar::Double,
    };
    Shape::Scalar(scalar, format!("{kind:?}").to_ascii_lowercase())
}

fn shape_name(s: &Shape) -> String {
    match s {
        Shape::Scalar(_, name) => name.clone(),
        Shape::Message(m) => format!("message {}", m.full_name()),
        Shape::Map(..) => "map".into(),
    }
}

/// A message's name within its package (`Outer.Inner`), which Confluent compares.
fn local_name(m: &MessageDescriptor) -> &str {
    let full = m.full_name();
    match m.package_name() {
        "" => full,
        p => full
            .strip_prefix(p)
            .and_then(|s| s.strip_prefix('.'))
            .unwrap_or(full),
    }
}

//! Protobuf schemas, through protox (a pure-Rust .proto compiler) and prost-reflect: a
//! schema arrives as .proto text (proto2 or proto3) or, as confluent-kafka's Python
//! `ProtobufSerializer` sends it, as the base64 of a serialized `FileDescriptorProto`;
//! both compile, in memory, with the files it imports (its references, by import path,
//! and Google's well-known types) into a [`DescriptorPool`].
//!
//! * identity: the compiled file printed back as .proto text ([`print`]); Confluent stores
//!   and serves the text, and the same schema as text or as a descriptor prints the same.
//! * `?format=serialized`: the base64 `FileDescriptorProto` of the schema's file.
//! * compatibility: Confluent's Protobuf rules ([`compat`]).
//! * [`message_by_indexes`]: Confluent's message indexes (the wire format's path from
//!   the file's top-level messages down to the record's message).

mod compat;
#[cfg(test)]
mod compat_tests;
mod print;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use miette::Diagnostic;
use prost::Message as _;
use prost_reflect::{DescriptorPool, FileDescriptor, MessageDescriptor};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
};
use protox::Compiler;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use crate::format::Resolved;

/// The file name the schema itself compiles under, as in Confluent's registry (its
/// `serialized` format names the file so). A reference may not take it.
pub const MAIN_FILE: &str = "default";

/// The deepest nesting of brackets in .proto text (messages, option values) or of
/// messages in a descriptor that is taken: it bounds the compiler's recursion on
/// untrusted input (protox itself stops messages at 31 levels, as protoc does).
pub const MAX_DEPTH: usize = 64;

/// Compiles `schema` with the files it imports: the schema's file, as [`MAIN_FILE`], in a
/// pool with its dependencies. A schema that does not compile gives protox's message,
/// with the file, line and column where it points.
pub fn compile(schema: Resolved<'_>) -> Result<FileDescriptor, String> {
    let mut files = Files::default();
    for (name, text) in schema.references {
        if name == MAIN_FILE {
            return Err(format!(
                "a reference may not be named '{MAIN_FILE}' (the schema's own file)"
            ));
        }
        files.add(name, text)?;
    }
    files.add(MAIN_FILE, schema.text)?;
    let sources = files.sources.clone();
    let mut resolver = ChainFileResolver::new();
    resolver.add(files);
    resolver.add(GoogleFileResolver::new());
    let mut compiler = Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler
        .open_file(MAIN_FILE)
        .map_err(|e| describe(&e, &sources))?;
    let pool: DescriptorPool = compiler.descriptor_pool();
    // prost-reflect takes a descriptor's map entries as they are, and its accessors
    // panic on one without a key or value: refused here, once for every user.
    if let Some(m) = pool
        .all_messages()
        .find(|m| m.is_map_entry() && (m.get_field(1).is_none() || m.get_field(2).is_none()))
    {
        return Err(format!(
            "{}: map entry {} lacks its key or value field",
            shown(m.parent_file().name()),
            m.full_name()
        ));
    }
    pool.get_file_by_name(MAIN_FILE)
        .ok_or_else(|| "the schema's file is missing after compiling it".to_string())
}

/// The schema's identity: its compiled file printed as .proto text (comments, spacing
/// and the order of imports' own contents do not count; text and descriptor agree).
pub fn identity(schema: Resolved<'_>) -> Result<String, String> {
    let file = compile(schema)?;
    let text = print::file(file.file_descriptor_proto());
    // A descriptor can hold what text cannot say (a name that is not an identifier, a
    // custom option): such a schema is refused rather than stored as text that does
    // not compile, or compiles to another schema.
    let again = compile(Resolved {
        text: &text,
        references: schema.references,
    })
    .map_err(|e| format!("the schema does not print as valid .proto text: {e}"))?;
    if normalized(file.file_descriptor_proto()) != normalized(again.file_descriptor_proto()) {
        return Err(
            "the schema's descriptor holds what .proto text cannot say (names must be \
             identifiers; custom options are not supported)"
                .to_string(),
        );
    }
    Ok(text)
}

/// A file's descriptor without what its .proto text does not decide: source positions,
/// the file's name, proto2's optional `syntax`, json names derived from field names,
/// and options left empty (prost-types drops custom options while decoding, leaving
/// their message behind; the text does not keep them).
fn normalized(file: &FileDescriptorProto) -> FileDescriptorProto {
    fn empty<T: Default + PartialEq>(options: &mut Option<T>) {
        if options.as_ref().is_some_and(|o| *o == T::default()) {
            *options = None;
        }
    }
    fn fields(fields: &mut [FieldDescriptorProto]) {
        for f in fields {
            if f.json_name.as_deref() == Some(print::default_json_name(f.name()).as_str()) {
                f.json_name = None;
            }
            empty(&mut f.options);
        }
    }
    fn enums(enums: &mut [EnumDescriptorProto]) {
        for e in enums {
            empty(&mut e.options);
            for v in &mut e.value {
                empty(&mut v.options);
            }
        }
    }
    let mut out = FileDescriptorProto {
        source_code_info: None,
        name: None,
        ..file.clone()
    };
    if out.syntax() == "proto2" {
        out.syntax = None;
    }
    empty(&mut out.options);
    fields(&mut out.extension);
    enums(&mut out.enum_type);
    for s in &mut out.service {
        empty(&mut s.options);
        for m in &mut s.method {
            empty(&mut m.options);
        }
    }
    // Without recursion: nesting is bounded, but so is the stack of a caller's thread.
    let mut stack: Vec<&mut DescriptorProto> = out.message_type.iter_mut().collect();
    while let Some(m) = stack.pop() {
        empty(&mut m.options);
        fields(&mut m.field);
        fields(&mut m.extension);
        enums(&mut m.enum_type);
        for o in &mut m.oneof_decl {
            empty(&mut o.options);
        }
        for r in &mut m.extension_range {
            empty(&mut r.options);
        }
        stack.extend(m.nested_type.iter_mut());
    }
    out
}

/// Confluent's `serialized` format: the base64 of the schema file's
/// `FileDescriptorProto` (without source positions), which clients load into a pool.
pub fn serialized(schema: Resolved<'_>) -> Result<String, String> {
    let file = compile(schema)?;
    let proto = FileDescriptorProto {
        source_code_info: None,
        ..file.file_descriptor_proto().clone()
    };
    Ok(BASE64.encode(proto.encode_to_vec()))
}

/// Confluent's Protobuf compatibility: can a reader with `reader` read what `writer`
/// wrote. Each reason names the difference (Confluent's name for it) and its path.
pub fn can_read(writer: Resolved<'_>, reader: Resolved<'_>) -> Result<(), Vec<String>> {
    let w = compile(writer).map_err(|e| vec![format!("the writer's schema: {e}")])?;
    let r = compile(reader).map_err(|e| vec![format!("the reader's schema: {e}")])?;
    let problems = compat::differences(&w, &r);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.iter().map(ToString::to_string).collect())
    }
}

/// The message Confluent's message indexes name in `file`: the first index picks a
/// top-level message, each next one a message nested in it. An empty list (the wire
/// format's single 0) means the first message. Map entries, which exist only in
/// descriptors, are not counted, as in Confluent's own serializers.
pub fn message_by_indexes(file: &FileDescriptor, indexes: &[i32]) -> Option<MessageDescriptor> {
    let (first, rest) = indexes.split_first().unwrap_or((&0, &[]));
    let mut message = file.messages().nth(usize::try_from(*first).ok()?)?;
    for &i in rest {
        let i = usize::try_from(i).ok()?;
        let child = message
            .child_messages()
            .filter(|m| !m.is_map_entry())
            .nth(i)?;
        message = child;
    }
    Some(message)
}

/// The files a compile may open, by import path, and the text of those given as text
/// (to place error positions).
#[derive(Default)]
struct Files {
    files: HashMap<String, File>,
    sources: HashMap<String, String>,
}

impl Files {
    /// Adds `text` under `name`: a base64 `FileDescriptorProto` when it is nothing but
    /// base64 (.proto text always holds a `;`, `{` or space), else .proto text.
    fn add(&mut self, name: &str, text: &str) -> Result<(), String> {
        let shown = shown(name);
        let file = if let Some(compact) = base64_only(text) {
            let bytes = BASE64
                .decode(compact.as_bytes())
                .map_err(|e| format!("{shown}: neither .proto text nor base64: {e}"))?;
            let mut proto = FileDescriptorProto::decode(bytes.as_slice())
                .map_err(|e| format!("{shown}: not a serialized FileDescriptorProto: {e}"))?;
            check_nesting(shown, &proto.message_type)?;
            // Imports name files by the names of the references that supply them.
            proto.name = Some(name.to_string());
            proto.source_code_info = None;
            File::from_file_descriptor_proto(proto)
        } else {
            check_brackets(shown, text)?;
            let file = File::from_source(name, text).map_err(|e| {
                describe(&e, &HashMap::from([(name.to_string(), text.to_string())]))
            })?;
            self.sources.insert(name.to_string(), text.to_string());
            file
        };
        // Checked here, not left to prost-reflect: version 0.16 panics on an unknown
        // syntax in a descriptor (it labels the error with a file not yet added).
        match file.file_descriptor_proto().syntax.as_deref() {
            None | Some("" | "proto2" | "proto3") => {}
            Some("editions") => {
                return Err(format!(
                    "{shown}: Protobuf editions are not supported (proto2 and proto3 are)"
                ));
            }
            Some(other) => {
                return Err(format!(
                    "{shown}: unknown syntax {other:?} (proto2 or proto3)"
                ));
            }
        }
        self.files.insert(name.to_string(), file);
        Ok(())
    }
}

impl FileResolver for Files {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        self.files
            .get(name)
            .cloned()
            .ok_or_else(|| protox::Error::file_not_found(name))
    }
}

/// `text` without whitespace, if it is non-empty and all base64 otherwise.
fn base64_only(text: &str) -> Option<String> {
    let compact: String = text.split_ascii_whitespace().collect();
    let base64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=');
    (!compact.is_empty() && compact.chars().all(base64)).then_some(compact)
}

/// How errors name a file: users know the schema they sent, not the name it compiles
/// under.
fn shown(name: &str) -> &str {
    if name == MAIN_FILE { "schema" } else { name }
}

/// protox's message, prefixed with `file:line:column` where it points into a file
/// given as text.
fn describe(e: &protox::Error, sources: &HashMap<String, String>) -> String {
    let msg = e.to_string();
    let Some(name) = e.file() else {
        return msg;
    };
    let shown = shown(name);
    let offset = e
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|l| l.offset());
    match (sources.get(name), offset) {
        (Some(text), Some(offset)) => {
            let (line, column) = line_column(text, offset);
            format!("{shown}:{line}:{column}: {msg}")
        }
        _ => format!("{shown}: {msg}"),
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Refuses .proto text whose brackets (`{ ( [ <`, outside strings and comments) nest
/// deeper than [`MAX_DEPTH`], before the compiler recurses into them.
fn check_brackets(name: &str, text: &str) -> Result<(), String> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 1;
            }
            quote @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote && bytes[i] != b'\n' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' | b'(' | b'[' | b'<' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    let (line, column) = line_column(text, i);
                    return Err(format!(
                        "{name}:{line}:{column}: nested more than {MAX_DEPTH} levels deep"
                    ));
                }
            }
            b'}' | b')' | b']' | b'>' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Refuses a descriptor whose messages nest deeper than [`MAX_DEPTH`] (the printer and
/// the compatibility check recurse into nested messages). Walks without recursing.
fn check_nesting(name: &str, messages: &[DescriptorProto]) -> Result<(), String> {
    let mut stack: Vec<(&DescriptorProto, usize)> = messages.iter().map(|m| (m, 1)).collect();
    while let Some((message, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(format!(
                "{name}: messages nested more than {MAX_DEPTH} levels deep"
            ));
        }
        stack.extend(message.nested_type.iter().map(|m| (m, depth + 1)));
    }
    Ok(())
}

//! The differences Confluent's registry finds between two JSON Schemas (its
//! `Difference.Type`), which of them keep the writer's data readable (its STRICT set),
//! and how each is told.

/// One kind of difference between the writer's schema and the reader's. The names are
/// Confluent's, as its error messages print them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    SchemaAdded,
    SchemaRemoved,
    TypeExtended,
    TypeNarrowed,
    TypeChanged,
    MaxLengthAdded,
    MaxLengthRemoved,
    MaxLengthIncreased,
    MaxLengthDecreased,
    MinLengthAdded,
    MinLengthRemoved,
    MinLengthIncreased,
    MinLengthDecreased,
    PatternAdded,
    PatternRemoved,
    PatternChanged,
    MaximumAdded,
    MaximumRemoved,
    MaximumIncreased,
    MaximumDecreased,
    MinimumAdded,
    MinimumRemoved,
    MinimumIncreased,
    MinimumDecreased,
    ExclusiveMaximumAdded,
    ExclusiveMaximumRemoved,
    ExclusiveMaximumIncreased,
    ExclusiveMaximumDecreased,
    ExclusiveMinimumAdded,
    ExclusiveMinimumRemoved,
    ExclusiveMinimumIncreased,
    ExclusiveMinimumDecreased,
    MultipleOfAdded,
    MultipleOfRemoved,
    MultipleOfExpanded,
    MultipleOfReduced,
    MultipleOfChanged,
    RequiredAttributeAdded,
    RequiredAttributeWithDefaultAdded,
    RequiredAttributeRemoved,
    MaxPropertiesAdded,
    MaxPropertiesRemoved,
    MaxPropertiesIncreased,
    MaxPropertiesDecreased,
    MinPropertiesAdded,
    MinPropertiesRemoved,
    MinPropertiesIncreased,
    MinPropertiesDecreased,
    AdditionalPropertiesAdded,
    AdditionalPropertiesRemoved,
    AdditionalPropertiesExtended,
    AdditionalPropertiesNarrowed,
    DependencyArrayAdded,
    DependencyArrayRemoved,
    DependencyArrayExtended,
    DependencyArrayNarrowed,
    DependencyArrayChanged,
    DependencySchemaAdded,
    DependencySchemaRemoved,
    RequiredPropertyAddedToOpenContentModel,
    RequiredPropertyWithDefaultAddedToOpenContentModel,
    OptionalPropertyAddedToOpenContentModel,
    PropertyWithEmptySchemaAddedToOpenContentModel,
    RequiredPropertyAddedToUnopenContentModel,
    RequiredPropertyWithDefaultAddedToUnopenContentModel,
    OptionalPropertyAddedToUnopenContentModel,
    PropertyRemovedFromOpenContentModel,
    PropertyWithFalseRemovedFromClosedContentModel,
    PropertyRemovedFromClosedContentModel,
    PropertyRemovedIsCoveredByPartiallyOpenContentModel,
    PropertyRemovedNotCoveredByPartiallyOpenContentModel,
    PropertyAddedIsCoveredByPartiallyOpenContentModel,
    PropertyAddedNotCoveredByPartiallyOpenContentModel,
    UnevaluatedPropertiesAdded,
    UnevaluatedPropertiesRemoved,
    UnevaluatedPropertiesExtended,
    UnevaluatedPropertiesNarrowed,
    MaxItemsAdded,
    MaxItemsRemoved,
    MaxItemsIncreased,
    MaxItemsDecreased,
    MinItemsAdded,
    MinItemsRemoved,
    MinItemsIncreased,
    MinItemsDecreased,
    MaxContainsAdded,
    MaxContainsRemoved,
    MaxContainsIncreased,
    MaxContainsDecreased,
    MinContainsAdded,
    MinContainsRemoved,
    MinContainsIncreased,
    MinContainsDecreased,
    UniqueItemsAdded,
    UniqueItemsRemoved,
    AdditionalItemsAdded,
    AdditionalItemsRemoved,
    AdditionalItemsExtended,
    AdditionalItemsNarrowed,
    UnevaluatedItemsAdded,
    UnevaluatedItemsRemoved,
    UnevaluatedItemsExtended,
    UnevaluatedItemsNarrowed,
    ItemAddedToOpenContentModel,
    ItemWithEmptySchemaAddedToOpenContentModel,
    ItemAddedToClosedContentModel,
    ItemRemovedFromOpenContentModel,
    ItemWithFalseRemovedFromClosedContentModel,
    ItemRemovedFromClosedContentModel,
    ItemRemovedIsCoveredByPartiallyOpenContentModel,
    ItemRemovedNotCoveredByPartiallyOpenContentModel,
    ItemAddedIsCoveredByPartiallyOpenContentModel,
    ItemAddedNotCoveredByPartiallyOpenContentModel,
    EnumArrayExtended,
    EnumArrayNarrowed,
    EnumArrayChanged,
    CombinedTypeExtended,
    CombinedTypeChanged,
    ProductTypeExtended,
    ProductTypeNarrowed,
    SumTypeExtended,
    SumTypeNarrowed,
    CombinedTypeSubschemasChanged,
    NotTypeExtended,
    NotTypeNarrowed,
}

impl Change {
    /// Whether the reader still accepts everything the writer did (Confluent's
    /// `COMPATIBLE_CHANGES_STRICT`).
    pub fn compatible(self) -> bool {
        use Change::*;
        matches!(
            self,
            SchemaRemoved
                | TypeExtended
                | MaxLengthIncreased
                | MaxLengthRemoved
                | MinLengthDecreased
                | MinLengthRemoved
                | PatternRemoved
                | MaximumIncreased
                | MaximumRemoved
                | MinimumDecreased
                | MinimumRemoved
                | ExclusiveMaximumIncreased
                | ExclusiveMaximumRemoved
                | ExclusiveMinimumDecreased
                | ExclusiveMinimumRemoved
                | MultipleOfReduced
                | MultipleOfRemoved
                | RequiredAttributeWithDefaultAdded
                | RequiredAttributeRemoved
                | DependencyArrayNarrowed
                | DependencyArrayRemoved
                | DependencySchemaRemoved
                | MaxPropertiesIncreased
                | MaxPropertiesRemoved
                | MinPropertiesDecreased
                | MinPropertiesRemoved
                | AdditionalPropertiesAdded
                | AdditionalPropertiesExtended
                | UnevaluatedPropertiesAdded
                | UnevaluatedPropertiesExtended
                | PropertyWithEmptySchemaAddedToOpenContentModel
                | RequiredPropertyWithDefaultAddedToUnopenContentModel
                | OptionalPropertyAddedToUnopenContentModel
                | PropertyWithFalseRemovedFromClosedContentModel
                | PropertyRemovedFromOpenContentModel
                | PropertyAddedIsCoveredByPartiallyOpenContentModel
                | PropertyRemovedIsCoveredByPartiallyOpenContentModel
                | MaxItemsIncreased
                | MaxItemsRemoved
                | MinItemsDecreased
                | MinItemsRemoved
                | MaxContainsIncreased
                | MaxContainsRemoved
                | MinContainsDecreased
                | MinContainsRemoved
                | UniqueItemsRemoved
                | AdditionalItemsAdded
                | AdditionalItemsExtended
                | UnevaluatedItemsAdded
                | UnevaluatedItemsExtended
                | ItemWithEmptySchemaAddedToOpenContentModel
                | ItemAddedToClosedContentModel
                | ItemWithFalseRemovedFromClosedContentModel
                | ItemRemovedFromOpenContentModel
                | ItemAddedIsCoveredByPartiallyOpenContentModel
                | ItemRemovedIsCoveredByPartiallyOpenContentModel
                | EnumArrayExtended
                | CombinedTypeExtended
                | ProductTypeNarrowed
                | SumTypeExtended
                | NotTypeNarrowed
        )
    }

    /// Confluent's name for it (`TYPE_CHANGED`).
    pub fn name(self) -> String {
        let camel = format!("{self:?}");
        let mut out = String::with_capacity(camel.len() + 8);
        for (i, c) in camel.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }

    /// What it means for data written with the writer's schema.
    fn describe(self) -> &'static str {
        use Change::*;
        let name = format!("{self:?}");
        match self {
            TypeChanged
            | CombinedTypeChanged
            | CombinedTypeSubschemasChanged
            | EnumArrayChanged => "the type differs between the writer's schema and the reader's",
            TypeNarrowed => {
                "the reader's schema takes only integers where the writer's took any number"
            }
            SchemaAdded => "the reader's schema constrains what the writer's left unconstrained",
            PatternChanged | MultipleOfChanged | DependencyArrayChanged => {
                "the value differs between the writer's schema and the reader's"
            }
            AdditionalPropertiesRemoved
            | AdditionalItemsRemoved
            | UnevaluatedPropertiesRemoved
            | UnevaluatedItemsRemoved => {
                "the reader's schema forbids what the writer's allowed here"
            }
            EnumArrayNarrowed
            | SumTypeNarrowed
            | AdditionalPropertiesNarrowed
            | AdditionalItemsNarrowed
            | UnevaluatedPropertiesNarrowed
            | UnevaluatedItemsNarrowed => {
                "the reader's schema takes fewer values here than the writer's"
            }
            DependencyArrayExtended | ProductTypeExtended | NotTypeExtended => {
                "the reader's schema has more constraints here than the writer's"
            }
            RequiredPropertyAddedToOpenContentModel
            | RequiredPropertyWithDefaultAddedToOpenContentModel
            | OptionalPropertyAddedToOpenContentModel
            | ItemAddedToOpenContentModel => {
                "the writer's schema has an open content model, so its data may have this \
                 property or item with any value, and the reader's schema constrains it"
            }
            RequiredPropertyAddedToUnopenContentModel => {
                "the reader's schema requires a property the writer's schema does not have"
            }
            PropertyRemovedFromClosedContentModel | ItemRemovedFromClosedContentModel => {
                "the reader's schema has a closed content model and lacks this property or \
                 item of the writer's"
            }
            PropertyRemovedNotCoveredByPartiallyOpenContentModel
            | ItemRemovedNotCoveredByPartiallyOpenContentModel => {
                "the reader's schema lacks this property or item of the writer's, and its \
                 partially open content model does not take the writer's values"
            }
            PropertyAddedNotCoveredByPartiallyOpenContentModel
            | ItemAddedNotCoveredByPartiallyOpenContentModel => {
                "the reader's schema adds this property or item, and the writer's partially \
                 open content model took values the reader's does not"
            }
            _ if name.ends_with("Added") => {
                "the reader's schema has this keyword and the writer's does not"
            }
            _ if name.ends_with("Decreased") || name.ends_with("Increased") => {
                "the reader's schema is stricter here than the writer's"
            }
            MultipleOfExpanded => "the reader's schema is stricter here than the writer's",
            _ => "compatible",
        }
    }
}

/// A difference and where it is: a JSON pointer into the schemas (without its `#/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diff {
    pub change: Change,
    pub path: String,
}

impl Diff {
    pub fn here(change: Change) -> Diff {
        Diff {
            change,
            path: String::new(),
        }
    }

    pub fn at(path: &str, change: Change) -> Diff {
        Diff {
            change,
            path: path.to_string(),
        }
    }

    /// The same difference, inside `prefix`.
    pub fn under(self, prefix: &str) -> Diff {
        let path = match (prefix.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}/{}", self.path),
        };
        Diff { path, ..self }
    }

    /// `TYPE_CHANGED at '#/properties/age': the type differs ...`.
    pub fn message(&self) -> String {
        format!(
            "{} at '#/{}': {}",
            self.change.name(),
            self.path,
            self.change.describe()
        )
    }
}

//! Kafka's rules for topic names (Topic.validate), in one place: the controller checks
//! them when it creates a topic, the broker before it asks the controller.

/// The longest topic name Kafka allows, in characters (bytes: the allowed ones are ASCII).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Why a name is not a valid topic name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid topic name '{name}': {reason}")]
pub struct InvalidTopicName {
    pub name: String,
    /// Which rule the name breaks, as a sentence fragment ("it is empty").
    pub reason: &'static str,
}

/// Kafka's rules for topic names (Topic.validate): 1..=249 characters of
/// `[a-zA-Z0-9._-]`, and not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), InvalidTopicName> {
    let bad = |reason| {
        Err(InvalidTopicName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return bad("it is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for ok in ["a", "orders.v2", "A_b-c", &"x".repeat(249)] {
            validate_topic_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "has space", "ünï", "a/b", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_error_names_the_topic_and_the_rule() {
        let e = validate_topic_name("a/b").unwrap_err();
        assert_eq!(e.name, "a/b");
        assert_eq!(
            e.to_string(),
            "invalid topic name 'a/b': only ASCII letters, digits, '.', '_' and '-' are allowed"
        );
        assert_eq!(
            validate_topic_name("..").unwrap_err().reason,
            "'.' and '..' are not allowed"
        );
    }
}

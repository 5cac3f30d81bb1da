use std::path::PathBuf;

use super::parse::{ObjectStoreUrl, Voter, parse_object_store, parse_voters};
use super::*;

#[test]
fn defaults_make_a_single_node_broker() {
    let c = ServeConfig::resolve(ServeArgs::default()).unwrap();
    assert_eq!(c.security.listeners[0].bind.to_string(), "127.0.0.1:9092");
    assert_eq!(c.http_addr.to_string(), "127.0.0.1:8080");
    assert_eq!(c.data_dir, PathBuf::from("strata-data"));
    // A development single node creates topics on first use, as Kafka does by default.
    assert!(c.auto_create_topics);
    assert_eq!(
        c.object_store,
        ObjectStoreUrl::File(PathBuf::from("strata-data/cold"))
    );
    assert_eq!(
        c.controller_voters,
        vec![Voter {
            id: 1,
            addr: "127.0.0.1:9093".into()
        }]
    );
}

#[test]
fn bad_values_name_their_flag() {
    let e = parse_object_store("ftp://x").unwrap_err().to_string();
    assert!(e.contains("--object-store"), "{e}");
    assert_eq!(
        parse_object_store("s3://b/p/q/").unwrap(),
        ObjectStoreUrl::S3 {
            bucket: "b".into(),
            prefix: "p/q".into()
        }
    );
    let e = parse_voters("1@a:1,x@b:2").unwrap_err().to_string();
    assert!(e.contains("--controller-voters"), "{e}");
    let e = ServeConfig::resolve(ServeArgs {
        kafka_addr: Some("0.0.0.0:9092".parse().unwrap()),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--advertised-kafka-addr"), "{e}");
}

#[test]
fn file_settings_apply_below_flags() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.toml");
    std::fs::write(
        &f,
        "data-dir = \"/tmp/x\"\nnode-id = 7\nauto-create-topics = false\n",
    )
    .unwrap();
    let c = ServeConfig::resolve(ServeArgs {
        config: Some(f.clone()),
        node_id: Some(3),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(c.node_id, 3);
    assert!(!c.auto_create_topics, "the file turns the default off");
    let c = ServeConfig::resolve(ServeArgs {
        config: Some(f.clone()),
        auto_create_topics: Some(true),
        ..Default::default()
    })
    .unwrap();
    assert!(c.auto_create_topics, "a flag beats the file");
    std::fs::write(&f, "data_dir = \"/tmp/x\"\n").unwrap();
    let e = ServeConfig::resolve(ServeArgs {
        config: Some(f),
        ..Default::default()
    })
    .unwrap_err();
    assert!(format!("{e:#}").contains("--config"), "{e:#}");
}

#[test]
fn http_gateway_settings_resolve() {
    let c = ServeConfig::resolve(ServeArgs::default()).unwrap();
    assert!(c.http_auth.is_none());
    assert_eq!(c.http_max_body, 8 << 20);
    assert_eq!(c.http_consumer_timeout, std::time::Duration::from_secs(300));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.toml");
    std::fs::write(
        &f,
        "http-auth = \"basic:ann:pw\"\nhttp-max-body = \"1MiB\"\nhttp-consumer-timeout = \"1m\"\n",
    )
    .unwrap();
    let c = ServeConfig::resolve(ServeArgs {
        config: Some(f),
        http_produce_queue: Some(7),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        c.http_auth,
        Some(strata_gateway::Auth::Basic {
            user: "ann".into(),
            password: "pw".into()
        })
    );
    assert_eq!(c.http_max_body, 1 << 20);
    assert_eq!(c.http_consumer_timeout, std::time::Duration::from_secs(60));
    assert_eq!(c.http_produce_queue, 7);
    // Left to its default, the byte queue grows to hold the largest body.
    assert_eq!(c.http_produce_queue_bytes, 64 << 20);
    let c = ServeConfig::resolve(ServeArgs {
        http_max_body: Some("100MiB".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.http_produce_queue_bytes, 100 << 20);
    let dir2 = tempfile::tempdir().unwrap();
    let f2 = dir2.path().join("s.toml");
    std::fs::write(&f2, "http-produce-queue-bytes = \"16MiB\"\n").unwrap();
    let c = ServeConfig::resolve(ServeArgs {
        config: Some(f2),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.http_produce_queue_bytes, 16 << 20);
    for (queue, body, want) in [
        ("512", None, "at least 1KiB"),
        ("1MiB", Some("2MiB"), "--http-max-body"),
        ("4GiB", None, "at most"),
        ("lots", None, "--http-produce-queue-bytes"),
    ] {
        let e = ServeConfig::resolve(ServeArgs {
            http_produce_queue_bytes: Some(queue.into()),
            http_max_body: body.map(Into::into),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains(want), "{queue}: {e}");
        assert!(e.contains("--http-produce-queue-bytes"), "{queue}: {e}");
    }
    let e = ServeConfig::resolve(ServeArgs {
        http_produce_queue: Some(0),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--http-produce-queue"), "{e}");
    let e = ServeConfig::resolve(ServeArgs {
        http_auth: Some("token".into()),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--http-auth"), "{e}");
    // The secret never reaches a log line that prints the settings.
    let c = ServeConfig::resolve(ServeArgs {
        http_auth: Some("bearer:hunter2".into()),
        ..Default::default()
    })
    .unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn the_config_file_holds_the_security_keys_too_and_bad_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.toml");
    std::fs::write(&f, "authorizer = \"on\"\nsuper-users = \"User:a\"\n").unwrap();
    let with_file = |security: crate::cli::security::SecurityArgs| {
        ServeConfig::resolve(ServeArgs {
            config: Some(f.clone()),
            security,
            ..Default::default()
        })
    };
    let c = with_file(Default::default()).unwrap();
    let authorizer = c.security.authorizer.expect("the file turns it on");
    assert_eq!(authorizer.super_users.len(), 1);
    // A flag beats the file: off, and then the file's --super-users contradicts it.
    let e = with_file(crate::cli::security::SecurityArgs {
        authorizer: Some("off".into()),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--authorizer on"), "{e}");
    for (text, key) in [
        ("bogus = 1\n", "bogus"),
        ("config = \"other.toml\"\n", "config"),
        ("node-id = \"x\"\n", "node-id"),
        ("listeners = 5\n", "listeners"),
        ("http-tls = \"yes\"\n", "http-tls"),
    ] {
        std::fs::write(&f, text).unwrap();
        let e = format!("{:#}", with_file(Default::default()).unwrap_err());
        assert!(e.contains("--config") && e.contains(key), "{text}: {e}");
    }
    let e = ServeConfig::resolve(ServeArgs {
        config: Some(dir.path().join("absent.toml")),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--config") && e.contains("cannot read"), "{e}");
}

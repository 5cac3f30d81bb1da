//! An independent S3 client (aws-sdk-s3) on the test S3 server, to see what Strata put
//! in the bucket.

use strata_store::testing::S3Server;

/// A client of `s3` with its credentials, path-style.
pub fn client(s3: &S3Server) -> aws_sdk_s3::Client {
    let env: std::collections::HashMap<String, String> = s3.env().into_iter().collect();
    let creds = aws_sdk_s3::config::Credentials::new(
        &env["AWS_ACCESS_KEY_ID"],
        &env["AWS_SECRET_ACCESS_KEY"],
        None,
        None,
        "test",
    );
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .endpoint_url(s3.endpoint())
        .region(aws_sdk_s3::config::Region::new(env["AWS_REGION"].clone()))
        .credentials_provider(creds)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// (key, size) of every object of `bucket` under `prefix`.
pub async fn list(client: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let r = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        for o in r.contents() {
            out.push((o.key().unwrap().to_string(), o.size().unwrap_or(0)));
        }
        token = r.next_continuation_token().map(str::to_string);
        if token.is_none() {
            return out;
        }
    }
}

/// The bucket's objects under a prefix, listed by an independent client.
pub fn objects(s3: &S3Server, prefix: &str) -> Vec<(String, i64)> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(list(&client(s3), s3.bucket(), prefix))
}

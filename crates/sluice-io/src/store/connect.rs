//! Connecting to a bucket: which store serves a URL and the credentials it signs with, found
//! the way each cloud's own SDK finds them, plus options given explicitly
//! ([`configure_storage`]). Every store remembers the lookups it made, so an access error can
//! say where sluice looked.
//!
//! - **S3** (`s3://`, `s3a://`): explicit options; `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`
//!   (+ `AWS_SESSION_TOKEN`); web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, as
//!   EKS IRSA sets them); the profile `AWS_PROFILE` (else `default`) in the shared credentials
//!   and config files (`~/.aws/credentials`, `~/.aws/config`, or `AWS_SHARED_CREDENTIALS_FILE`
//!   / `AWS_CONFIG_FILE`); ECS/EKS container credentials (`AWS_CONTAINER_CREDENTIALS_*`); and
//!   last the instance metadata service (IMDSv2, `AWS_METADATA_ENDPOINT` to move it). Region
//!   and endpoint come from the environment, then the profile.
//! - **GCS** (`gs://`): explicit options; `GOOGLE_SERVICE_ACCOUNT*` / `GOOGLE_APPLICATION_CREDENTIALS`
//!   (a service-account key file); gcloud's application default credentials file; the
//!   metadata server (GCE, GKE workload identity).
//! - **Azure Blob** (`az://`, `abfs[s]://`, `azure://`): explicit options; the `AZURE_STORAGE_*`
//!   variables (account key, SAS, service principal, federated token as AKS workload identity
//!   sets it); managed identity through the instance metadata endpoint.
//! - **HTTP(S)**: plain GETs (listing needs a WebDAV server).
//!
//! Anonymous access to public buckets: `anonymous=True` in the options, or the SDK variables
//! `AWS_SKIP_SIGNATURE` / `GOOGLE_SKIP_SIGNATURE` / `AZURE_SKIP_SIGNATURE` set to `true`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::limit::LimitStore;
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};
use sluice_core::{Error, Result};

/// Requests in flight per object store at most (bounded so a wide pipeline cannot flood a
/// bucket): a ceiling above the permits data reads take ([`super::hedge::MAX_IN_FLIGHT`],
/// which pace them), so a response whose body is still being read does not hold up the next
/// request's clock.
pub const MAX_REQUESTS: usize = 512;

/// A connected store and the credential lookups that chose how it signs.
#[derive(Debug, Clone)]
pub(crate) struct Connected {
    pub store: Arc<dyn ObjectStore>,
    pub lookups: Arc<str>,
}

/// Options given with [`configure_storage`], by URL prefix (`s3://` or `s3://bucket`).
static OPTIONS: LazyLock<Mutex<BTreeMap<String, BTreeMap<String, String>>>> =
    LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// Sets options for every store whose URL starts with `prefix` (a scheme such as `s3://`, or
/// a bucket such as `s3://my-bucket`); a bucket's options override its scheme's. Keys are
/// the clouds' own configuration names without their prefix (`access_key_id`,
/// `secret_access_key`, `session_token`, `region`, `endpoint`, `role_arn`,
/// `service_account_key`, `account_name`, `account_key`, `sas_key`, …), plus `anonymous`
/// (`"true"` to read public buckets unsigned) and, for S3, `profile`. Unknown keys are an
/// error naming the key. Stores already connected under `prefix` reconnect with the new
/// options. The options live in this process (Ray workers read their own environment).
///
/// ```
/// sluice_io::store::configure_storage(
///     "s3://public-data",
///     &[("anonymous".into(), "true".into()), ("region".into(), "eu-west-1".into())],
/// )
/// .unwrap();
/// assert!(sluice_io::store::configure_storage("s3://x", &[("colour".into(), "red".into())]).is_err());
/// ```
pub fn configure_storage(prefix: &str, options: &[(String, String)]) -> Result<()> {
    let scheme = scheme_of(prefix).ok_or_else(|| {
        Error::invalid(format!(
            "configure_storage: '{prefix}' is not a store URL (s3://, gs://, az://, http(s)://)"
        ))
    })?;
    for (k, v) in options {
        check_key(scheme, k, v)
            .map_err(|e| Error::invalid(format!("configure_storage('{prefix}'): {e}")))?;
    }
    let mut all = OPTIONS.lock().unwrap_or_else(|p| p.into_inner());
    let entry = all
        .entry(prefix.trim_end_matches('/').to_string())
        .or_default();
    entry.extend(options.iter().cloned());
    drop(all);
    super::forget_stores(prefix);
    Ok(())
}

/// The store family a URL belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    S3,
    Gcs,
    Azure,
    Http,
}

fn scheme_of(url: &str) -> Option<Scheme> {
    let scheme = url.split_once("://")?.0;
    Some(match scheme {
        "s3" | "s3a" => Scheme::S3,
        "gs" => Scheme::Gcs,
        "az" | "abfs" | "abfss" | "azure" | "adl" => Scheme::Azure,
        "http" | "https" => Scheme::Http,
        _ => return None,
    })
}

/// Whether `entry` names an object in a store rather than a local path.
pub(crate) fn is_store_url(entry: &str) -> bool {
    scheme_of(entry).is_some()
}

/// Whether `url` names a file on a plain web server (`http(s)://`), not a bucket.
pub(crate) fn is_web_url(url: &str) -> bool {
    scheme_of(url) == Some(Scheme::Http)
}

/// Options that are ours, not the cloud SDK's.
const OWN_KEYS: &[&str] = &["anonymous", "profile"];

fn check_key(scheme: Scheme, key: &str, value: &str) -> std::result::Result<(), String> {
    if OWN_KEYS.contains(&key) {
        if key == "profile" && scheme != Scheme::S3 {
            return Err("'profile' is an S3 option".into());
        }
        return Ok(());
    }
    let known = match scheme {
        Scheme::S3 => AmazonS3ConfigKey::from_str(key).is_ok(),
        Scheme::Gcs => GoogleConfigKey::from_str(key).is_ok(),
        Scheme::Azure => AzureConfigKey::from_str(key).is_ok(),
        Scheme::Http => ClientConfigKey::from_str(key).is_ok(),
    };
    if !known {
        return Err(format!("unknown option '{key}' (value '{value}')"));
    }
    Ok(())
}

/// The options for the store at `base`: the scheme's, then the bucket's.
fn options_for(base: &str) -> BTreeMap<String, String> {
    let all = OPTIONS.lock().unwrap_or_else(|p| p.into_inner());
    let scheme = base.split_once("://").map_or("", |(s, _)| s);
    let mut out = BTreeMap::new();
    for prefix in [format!("{scheme}://"), base.to_string()] {
        if let Some(o) = all.get(prefix.trim_end_matches('/')) {
            out.extend(o.clone());
        }
    }
    out
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn truthy(v: Option<&String>) -> bool {
    v.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
}

fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: 4,
        retry_timeout: Duration::from_secs(60),
        ..RetryConfig::default()
    }
}

/// Connects to the store at `base` (`s3://bucket`, `gs://bucket`, `http://host:port`, …).
pub(crate) fn connect(base: &str) -> Result<Connected> {
    let options = options_for(base);
    let (store, lookups): (Arc<dyn ObjectStore>, Vec<String>) =
        match scheme_of(base).unwrap_or(Scheme::Http) {
            Scheme::S3 => {
                let (s, l) = s3(base, &options)?;
                (Arc::new(LimitStore::new(s, MAX_REQUESTS)), l)
            }
            Scheme::Gcs => {
                let (s, l) = gcs(base, &options)?;
                (Arc::new(LimitStore::new(s, MAX_REQUESTS)), l)
            }
            Scheme::Azure => {
                let (s, l) = azure(base, &options)?;
                (Arc::new(LimitStore::new(s, MAX_REQUESTS)), l)
            }
            Scheme::Http => {
                let mut b = HttpBuilder::new().with_url(base).with_retry(retry());
                for (k, v) in &options {
                    if let Ok(key) = ClientConfigKey::from_str(k) {
                        b = b.with_config(key, v);
                    }
                }
                let s = b
                    .build()
                    .map_err(|e| Error::invalid(format!("{base}: {e}")))?;
                (
                    Arc::new(LimitStore::new(s, MAX_REQUESTS)),
                    vec!["none (plain HTTP GETs)".into()],
                )
            }
        };
    Ok(Connected {
        store,
        lookups: lookups.join("; ").into(),
    })
}

fn s3(
    base: &str,
    options: &BTreeMap<String, String>,
) -> Result<(object_store::aws::AmazonS3, Vec<String>)> {
    let bucket = base.split("://").nth(1).unwrap_or_default();
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry());
    let mut lookups = Vec::new();
    let anonymous = truthy(options.get("anonymous")) || truthy(env("AWS_SKIP_SIGNATURE").as_ref());
    let explicit_keys = options.contains_key("access_key_id");
    let env_keys = env("AWS_ACCESS_KEY_ID").is_some() && env("AWS_SECRET_ACCESS_KEY").is_some();
    let web_identity =
        env("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() && env("AWS_ROLE_ARN").is_some();
    let profile_name = options
        .get("profile")
        .cloned()
        .or_else(|| env("AWS_PROFILE"))
        .unwrap_or_else(|| "default".into());
    let profile = aws_profile(&profile_name);

    if anonymous {
        lookups.push("anonymous (unsigned requests)".into());
        b = b.with_skip_signature(true);
    } else if explicit_keys {
        lookups.push("explicit options: access_key_id (used)".into());
    } else if env_keys {
        lookups.push("environment: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (used)".into());
    } else {
        lookups.push("environment: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY not set".into());
        if web_identity {
            lookups.push(format!(
                "web identity: token file {} for role {} (used)",
                env("AWS_WEB_IDENTITY_TOKEN_FILE").unwrap_or_default(),
                env("AWS_ROLE_ARN").unwrap_or_default()
            ));
        } else {
            lookups.push("web identity: AWS_WEB_IDENTITY_TOKEN_FILE/AWS_ROLE_ARN not set".into());
            match profile.keys() {
                Some((key, secret, token)) => {
                    lookups.push(format!(
                        "profile '{profile_name}' in {} (used)",
                        profile.source
                    ));
                    b = b.with_access_key_id(key).with_secret_access_key(secret);
                    if let Some(t) = token {
                        b = b.with_token(t);
                    }
                }
                None => {
                    lookups.push(format!(
                        "profile '{profile_name}': no keys in {}",
                        profile.files_read()
                    ));
                    let container = [
                        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                    ]
                    .iter()
                    .find_map(|v| env(v).map(|u| format!("{v}={u}")));
                    match container {
                        Some(c) => lookups.push(format!("container credentials: {c} (used)")),
                        None => {
                            lookups.push(
                                "container credentials: AWS_CONTAINER_CREDENTIALS_* not set".into(),
                            );
                            lookups.push(format!(
                                "instance metadata at {} (used last)",
                                env("AWS_METADATA_ENDPOINT")
                                    .unwrap_or_else(|| "http://169.254.169.254".into())
                            ));
                        }
                    }
                }
            }
        }
    }
    // Region and endpoint: environment first (from_env read it), then the profile.
    if env("AWS_REGION").is_none() && env("AWS_DEFAULT_REGION").is_none() {
        b = b.with_region(profile.get("region").unwrap_or("us-east-1"));
    }
    let endpoint = env("AWS_ENDPOINT_URL_S3")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .or_else(|| env("AWS_ENDPOINT"))
        .or_else(|| profile.get("endpoint_url").map(str::to_string));
    if let Some(ep) = &endpoint {
        b = b.with_endpoint(ep);
    }
    for (k, v) in options {
        if !OWN_KEYS.contains(&k.as_str()) {
            let key = AmazonS3ConfigKey::from_str(k)
                .map_err(|e| Error::invalid(format!("{base}: option '{k}': {e}")))?;
            b = b.with_config(key, v);
        }
    }
    // An endpoint named with http:// is a choice (a local S3-compatible server), as the
    // SDKs take it; object_store would otherwise refuse plain HTTP.
    let endpoint = options.get("endpoint").or(endpoint.as_ref());
    if endpoint.is_some_and(|e| e.starts_with("http://")) {
        b = b.with_allow_http(true);
    }
    let s3 = b
        .build()
        .map_err(|e| Error::invalid(format!("{base}: {e}")))?;
    Ok((s3, lookups))
}

fn gcs(
    base: &str,
    options: &BTreeMap<String, String>,
) -> Result<(object_store::gcp::GoogleCloudStorage, Vec<String>)> {
    let bucket = base.split("://").nth(1).unwrap_or_default();
    let mut b = GoogleCloudStorageBuilder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry());
    let mut lookups = Vec::new();
    let anonymous =
        truthy(options.get("anonymous")) || truthy(env("GOOGLE_SKIP_SIGNATURE").as_ref());
    let vars = [
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_PATH",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_BEARER_TOKEN",
    ];
    let adc = home().map(|h| h.join(".config/gcloud/application_default_credentials.json"));
    if anonymous {
        lookups.push("anonymous (unsigned requests)".into());
        b = b.with_config(GoogleConfigKey::SkipSignature, "true");
    } else if options
        .keys()
        .any(|k| k.contains("service_account") || k.contains("credentials") || k.contains("token"))
    {
        lookups.push("explicit options (used)".into());
    } else if let Some(v) = vars.iter().find(|v| env(v).is_some()) {
        lookups.push(format!("environment: {v} (used)"));
    } else {
        lookups.push(format!("environment: {} not set", vars.join("/")));
        match adc.as_ref().filter(|p| p.exists()) {
            Some(p) => lookups.push(format!(
                "application default credentials {} (used)",
                p.display()
            )),
            None => {
                lookups.push(
                    "application default credentials: ~/.config/gcloud/application_default_credentials.json not found"
                        .into(),
                );
                lookups.push("metadata server (GCE/GKE workload identity) (used last)".into());
            }
        }
    }
    for (k, v) in options {
        if !OWN_KEYS.contains(&k.as_str()) {
            let key = GoogleConfigKey::from_str(k)
                .map_err(|e| Error::invalid(format!("{base}: option '{k}': {e}")))?;
            b = b.with_config(key, v);
        }
    }
    // An emulator's plain-HTTP base URL is a choice, as for S3 endpoints.
    let base_url = options
        .get("base_url")
        .cloned()
        .or_else(|| env("GOOGLE_BASE_URL"));
    if base_url.is_some_and(|u| u.starts_with("http://")) {
        b = b.with_config(GoogleConfigKey::Client(ClientConfigKey::AllowHttp), "true");
    }
    let gcs = b
        .build()
        .map_err(|e| Error::invalid(format!("{base}: {e}")))?;
    Ok((gcs, lookups))
}

fn azure(
    base: &str,
    options: &BTreeMap<String, String>,
) -> Result<(object_store::azure::MicrosoftAzure, Vec<String>)> {
    let mut b = MicrosoftAzureBuilder::from_env()
        .with_url(base)
        .with_retry(retry());
    let mut lookups = Vec::new();
    let anonymous =
        truthy(options.get("anonymous")) || truthy(env("AZURE_SKIP_SIGNATURE").as_ref());
    let vars = [
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_SAS_KEY",
        "AZURE_STORAGE_TOKEN",
        "AZURE_STORAGE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
    ];
    if anonymous {
        lookups.push("anonymous (unsigned requests)".into());
        b = b.with_skip_signature(true);
    } else if options
        .keys()
        .any(|k| k.contains("key") || k.contains("secret") || k.contains("token"))
    {
        lookups.push("explicit options (used)".into());
    } else if let Some(v) = vars.iter().find(|v| env(v).is_some()) {
        lookups.push(format!("environment: {v} (used)"));
    } else {
        lookups.push(format!("environment: {} not set", vars.join("/")));
        lookups.push("managed identity via instance metadata (used last)".into());
    }
    for (k, v) in options {
        if !OWN_KEYS.contains(&k.as_str()) {
            let key = AzureConfigKey::from_str(k)
                .map_err(|e| Error::invalid(format!("{base}: option '{k}': {e}")))?;
            b = b.with_config(key, v);
        }
    }
    let az = b.build().map_err(|e| {
        Error::invalid(format!(
            "{base}: {e} (the account comes from the URL, AZURE_STORAGE_ACCOUNT_NAME or the \
             option account_name)"
        ))
    })?;
    Ok((az, lookups))
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// One profile's settings from the shared AWS files.
#[derive(Debug, Default)]
struct AwsProfile {
    values: BTreeMap<String, String>,
    /// The files that gave values, for messages.
    source: String,
    /// Every file looked at.
    looked: Vec<String>,
}

impl AwsProfile {
    fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }
    fn keys(&self) -> Option<(&str, &str, Option<&str>)> {
        Some((
            self.get("aws_access_key_id")?,
            self.get("aws_secret_access_key")?,
            self.get("aws_session_token"),
        ))
    }
    fn files_read(&self) -> String {
        self.looked.join(" or ")
    }
}

/// Reads profile `name` from the credentials file, then the config file (where it is
/// `[profile name]`, except `[default]`), as the AWS SDKs do; the credentials file wins.
fn aws_profile(name: &str) -> AwsProfile {
    let aws_dir = home().map(|h| h.join(".aws"));
    let credentials = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| aws_dir.as_ref().map(|d| d.join("credentials")));
    let config = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| aws_dir.as_ref().map(|d| d.join("config")));
    let mut profile = AwsProfile::default();
    let mut sources = Vec::new();
    let config_section = if name == "default" {
        "default".to_string()
    } else {
        format!("profile {name}")
    };
    for (path, section) in [(config, config_section), (credentials, name.to_string())] {
        let Some(path) = path else { continue };
        profile.looked.push(path.display().to_string());
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let values = ini_section(&text, &section);
        if !values.is_empty() {
            sources.push(path.display().to_string());
        }
        profile.values.extend(values);
    }
    profile.source = sources.join(" and ");
    profile
}

/// `key = value` pairs of `[section]` in an INI file (comments `#`/`;`, keys lower-cased).
fn ini_section(text: &str, section: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                out.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_are_read_by_name() {
        let text = "[default]\naws_access_key_id = A\n# c\n[profile dev]\nregion=eu-west-1\n\
                    AWS_SECRET_ACCESS_KEY = S\n[other]\nregion = x\n";
        assert_eq!(
            ini_section(text, "default")
                .get("aws_access_key_id")
                .unwrap(),
            "A"
        );
        let dev = ini_section(text, "profile dev");
        assert_eq!(dev.get("region").unwrap(), "eu-west-1");
        assert_eq!(dev.get("aws_secret_access_key").unwrap(), "S");
        assert!(ini_section(text, "missing").is_empty());
    }

    #[test]
    fn schemes_and_option_keys_are_checked() {
        assert_eq!(
            scheme_of("abfss://c@a.dfs.core.windows.net/x"),
            Some(Scheme::Azure)
        );
        assert_eq!(scheme_of("s3a://b/k"), Some(Scheme::S3));
        assert_eq!(scheme_of("/tmp/x"), None);
        assert!(check_key(Scheme::S3, "endpoint", "http://x").is_ok());
        assert!(check_key(Scheme::Gcs, "service_account_key", "{}").is_ok());
        assert!(check_key(Scheme::Azure, "account_name", "a").is_ok());
        assert!(check_key(Scheme::Gcs, "profile", "p").is_err());
        let e = configure_storage("s3://b", &[("colour".into(), "red".into())]).unwrap_err();
        assert!(e.to_string().contains("unknown option 'colour'"), "{e}");
        assert!(configure_storage("/local", &[]).is_err());
    }

    #[test]
    fn anonymous_s3_needs_no_credentials_and_says_so() {
        let base = "s3://sluice-unit-anonymous";
        configure_storage(base, &[("anonymous".into(), "true".into())]).unwrap();
        let c = connect(base).unwrap();
        assert!(c.lookups.contains("anonymous"), "{}", c.lookups);
    }
}

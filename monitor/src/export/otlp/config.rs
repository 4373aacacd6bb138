//! Where and how `--otlp` pushes: the options, and the OpenTelemetry exporter variables
//! (`OTEL_EXPORTER_OTLP_*`, as the OTLP exporter specification names them) read once at
//! start, so that a mistake fails before anything is profiled. For each setting the
//! option wins, then the `_METRICS_` variable, then the general one.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use ureq::http::{HeaderName, HeaderValue, Uri};
use ureq::tls::{parse_pem, Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

use crate::export::error::ExportError;

/// The metrics path of OTLP/HTTP, appended to a base URL.
const METRICS_PATH: &str = "v1/metrics";
/// Where the specification's exporters push when nothing says otherwise.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/metrics";
/// The specification's default for `OTEL_EXPORTER_OTLP_TIMEOUT`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP options of `monitor`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct OtlpOptions {
    /// Push the metrics to an OpenTelemetry collector (OTLP/HTTP protobuf) every
    /// --interval and once at the end. URL: http:// or https://, the full metrics URL
    /// (e.g. https://collector:4318/v1/metrics), or a base URL alone (http://host:4318),
    /// completed with /v1/metrics; another path is refused. Without URL:
    /// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (as given), OTEL_EXPORTER_OTLP_ENDPOINT (with
    /// /v1/metrics appended), or http://localhost:4318/v1/metrics. A collector that is down
    /// is retried with backoff and never delays the profile; the summary says what it did
    /// not receive, and the exit status is 3 when it received nothing.
    #[arg(id = "otlp", long = "otlp", value_name = "URL")]
    pub url: Option<Option<String>>,
    /// A header sent with every push (repeatable), e.g. "Authorization=Bearer TOKEN";
    /// added to OTEL_EXPORTER_OTLP_[METRICS_]HEADERS, replacing a header of the same name.
    #[arg(long = "otlp-header", value_name = "KEY=VALUE", requires = "otlp")]
    pub headers: Vec<String>,
    /// Compress each push (default: OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION, else none).
    #[arg(long = "otlp-compression", value_name = "gzip|none", value_parser = compression, requires = "otlp")]
    pub compression: Option<bool>,
}

/// `gzip` or `none`: whether to gzip.
fn compression(value: &str) -> Result<bool, &'static str> {
    match value {
        "gzip" => Ok(true),
        "none" => Ok(false),
        _ => Err("gzip or none"),
    }
}

/// What the pusher needs, checked.
pub struct Config {
    pub url: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub gzip: bool,
    pub timeout: Duration,
    pub tls: TlsConfig,
}

/// The environment the configuration is read from: the process's, or a test's.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `OTEL_EXPORTER_OTLP_METRICS_{what}`, else `OTEL_EXPORTER_OTLP_{what}`: the variable's
/// name and its value.
fn setting(env: Env, what: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_METRICS_{what}"),
        format!("OTEL_EXPORTER_OTLP_{what}"),
    ]
    .into_iter()
    .find_map(|name| env(&name).map(|value| (name, value)))
}

impl Config {
    /// The configuration `options` and `env` give, or why it cannot be used.
    pub fn resolve(options: &OtlpOptions, env: Env) -> Result<Config, ExportError> {
        if let Some((name, value)) = setting(env, "PROTOCOL") {
            if value != "http/protobuf" {
                return Err(ExportError::Setting {
                    name,
                    value,
                    why: "only http/protobuf is spoken: OTLP/HTTP with protobuf bodies",
                });
            }
        }
        let url = endpoint(options.url.as_ref().and_then(Option::as_deref), env)?;
        let mut headers = match setting(env, "HEADERS") {
            Some((name, value)) => env_headers(&name, &value)?,
            None => Vec::new(),
        };
        for given in &options.headers {
            let (key, value) = given.split_once('=').ok_or_else(|| ExportError::Header {
                from: "--otlp-header".into(),
                given: given.clone(),
                why: "not KEY=VALUE",
            })?;
            let header = header("--otlp-header", given, key, value)?;
            headers.retain(|(name, _)| *name != header.0);
            headers.push(header);
        }
        let gzip = match options.compression {
            Some(gzip) => gzip,
            None => match setting(env, "COMPRESSION") {
                Some((name, value)) => {
                    compression(&value).map_err(|why| ExportError::Setting { name, value, why })?
                }
                None => false,
            },
        };
        Ok(Config {
            url,
            headers,
            gzip,
            timeout: timeout(env)?,
            tls: tls(env)?,
        })
    }
}

/// The URL pushed to: `given` by `--otlp` (its path checked), or the variables'.
fn endpoint(given: Option<&str>, env: Env) -> Result<String, ExportError> {
    if let Some(url) = given {
        let uri = check_url("--otlp", url)?;
        return match uri.path() {
            "" | "/" => Ok(format!("{}/{METRICS_PATH}", url.trim_end_matches('/'))),
            path if path.ends_with(&format!("/{METRICS_PATH}")) => Ok(url.to_owned()),
            _ => Err(ExportError::Url {
                from: "--otlp".into(),
                url: url.to_owned(),
                why: "its path does not end in /v1/metrics: give the collector's metrics URL \
                      (https://collector:4318/v1/metrics), its base URL alone \
                      (https://collector:4318), or set OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, \
                      which is used as given",
            }),
        };
    }
    let name = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
    if let Some(url) = env(name) {
        check_url(name, &url)?;
        return Ok(url);
    }
    let name = "OTEL_EXPORTER_OTLP_ENDPOINT";
    if let Some(base) = env(name) {
        check_url(name, &base)?;
        return Ok(format!("{}/{METRICS_PATH}", base.trim_end_matches('/')));
    }
    Ok(DEFAULT_ENDPOINT.to_owned())
}

/// `url` parsed, when it is an http:// or https:// URL.
fn check_url(from: &str, url: &str) -> Result<Uri, ExportError> {
    let bad = |why| ExportError::Url {
        from: from.to_owned(),
        url: url.to_owned(),
        why,
    };
    if !url.starts_with("http://") && !url.starts_with("https://") {
        return Err(bad(
            "not an http:// or https:// URL (e.g. http://127.0.0.1:4318/v1/metrics)",
        ));
    }
    match url.parse::<Uri>() {
        Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(uri),
        _ => Err(bad("not a valid URL")),
    }
}

/// `key1=value1,key2=value2`, values percent-encoded (the W3C baggage format the
/// specification gives the variable).
fn env_headers(name: &str, list: &str) -> Result<Vec<(HeaderName, HeaderValue)>, ExportError> {
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let (key, value) = item.split_once('=').ok_or_else(|| ExportError::Header {
                from: name.to_owned(),
                given: item.to_owned(),
                why: "not key=value",
            })?;
            let value = percent_decode_str(value.trim()).decode_utf8_lossy();
            header(name, item, key.trim(), &value)
        })
        .collect()
}

/// One header, when its name and value can be sent.
fn header(
    from: &str,
    given: &str,
    key: &str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), ExportError> {
    let bad = |why| ExportError::Header {
        from: from.to_owned(),
        given: given.to_owned(),
        why,
    };
    let name = HeaderName::from_bytes(key.as_bytes())
        .map_err(|_| bad("the name is not an HTTP header name"))?;
    let value = HeaderValue::from_str(value)
        .map_err(|_| bad("the value has characters a header cannot carry"))?;
    Ok((name, value))
}

/// `OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT`: milliseconds, each push at most this long.
fn timeout(env: Env) -> Result<Duration, ExportError> {
    let Some((name, value)) = setting(env, "TIMEOUT") else {
        return Ok(DEFAULT_TIMEOUT);
    };
    match value.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(ExportError::Setting {
            name,
            value,
            why: "not a positive number of milliseconds",
        }),
    }
}

/// The roots trusted for https (`OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE`'s, else
/// Mozilla's, built in) and the client's certificate for mutual TLS
/// (`..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY`).
fn tls(env: Env) -> Result<TlsConfig, ExportError> {
    let mut tls = TlsConfig::builder();
    if let Some((name, path)) = setting(env, "CERTIFICATE") {
        let (certificates, _) = pem(&name, &path)?;
        if certificates.is_empty() {
            return Err(pem_error(&name, &path, "holds no certificate"));
        }
        tls = tls.root_certs(RootCerts::new_with_certs(&certificates));
    }
    match (
        setting(env, "CLIENT_CERTIFICATE"),
        setting(env, "CLIENT_KEY"),
    ) {
        (None, None) => {}
        (Some((cert_name, cert_path)), Some((key_name, key_path))) => {
            let (chain, _) = pem(&cert_name, &cert_path)?;
            let key = pem(&key_name, &key_path)?
                .1
                .ok_or_else(|| pem_error(&key_name, &key_path, "holds no private key"))?;
            if chain.is_empty() {
                return Err(pem_error(&cert_name, &cert_path, "holds no certificate"));
            }
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        (Some((name, path)), None) | (None, Some((name, path))) => {
            return Err(pem_error(
                &name,
                &path,
                "mutual TLS needs both OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and \
                 OTEL_EXPORTER_OTLP_CLIENT_KEY",
            ))
        }
    }
    Ok(tls.build())
}

fn pem_error(name: &str, path: &str, why: impl Into<String>) -> ExportError {
    ExportError::Pem {
        name: name.to_owned(),
        path: PathBuf::from(path),
        why: why.into(),
    }
}

/// The certificates and the first private key of a PEM file.
fn pem(
    name: &str,
    path: &str,
) -> Result<(Vec<Certificate<'static>>, Option<PrivateKey<'static>>), ExportError> {
    let bytes = fs::read(path).map_err(|e| pem_error(name, path, e.to_string()))?;
    let mut certificates = Vec::new();
    let mut key = None;
    for item in parse_pem(&bytes) {
        match item.map_err(|e| pem_error(name, path, format!("not PEM: {e}")))? {
            PemItem::Certificate(c) => certificates.push(c),
            PemItem::PrivateKey(k) => key = key.or(Some(k)),
            _ => {}
        }
    }
    Ok((certificates, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(
        url: Option<&str>,
        headers: &[&str],
        vars: &[(&str, &str)],
    ) -> Result<Config, ExportError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let options = OtlpOptions {
            url: Some(url.map(str::to_owned)),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            compression: None,
        };
        Config::resolve(&options, &|name| vars.get(name).cloned())
    }

    fn url(given: Option<&str>, vars: &[(&str, &str)]) -> String {
        resolve(given, &[], vars)
            .map(|c| c.url)
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_base_url_is_completed_with_the_metrics_path_and_a_metrics_url_is_used_as_given() {
        assert_eq!(url(Some("http://h:4318"), &[]), "http://h:4318/v1/metrics");
        assert_eq!(
            url(Some("https://h:4318/"), &[]),
            "https://h:4318/v1/metrics"
        );
        assert_eq!(
            url(Some("http://vm:8428/opentelemetry/v1/metrics"), &[]),
            "http://vm:8428/opentelemetry/v1/metrics"
        );
        assert!(url(Some("http://h:4318/v1/traces"), &[]).contains("does not end in /v1/metrics"));
        assert_eq!(url(None, &[]), DEFAULT_ENDPOINT);
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://gw/otlp/");
        assert_eq!(url(None, &[base]), "https://gw/otlp/v1/metrics");
        let exact = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "https://gw/ingest");
        assert_eq!(url(None, &[base, exact]), "https://gw/ingest");
        assert_eq!(
            url(Some("http://h:1"), &[base, exact]),
            "http://h:1/v1/metrics"
        );
        for bad in [
            "127.0.0.1:4318",
            "http://[::1",
            "ftp://h/v1/metrics",
            "http:///v1/metrics",
        ] {
            assert!(resolve(Some(bad), &[], &[]).is_err(), "{bad}");
        }
    }

    #[test]
    fn headers_come_from_the_metrics_variable_first_and_the_options_replace_them_by_name() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_HEADERS", "ignored=1"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                "Authorization=Basic%20YQ==, x-tenant = a",
            ),
        ];
        let config = resolve(None, &["X-Tenant=b", "x-other=c=d"], &vars).unwrap();
        let headers: Vec<(&str, &str)> = config
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            headers,
            [
                ("authorization", "Basic YQ=="),
                ("x-tenant", "b"),
                ("x-other", "c=d")
            ]
        );
        for bad in ["novalue", "bad name=1", "k=line\nbreak"] {
            assert!(
                matches!(resolve(None, &[bad], &[]), Err(ExportError::Header { .. })),
                "{bad}"
            );
        }
        let env = [("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b")];
        assert!(matches!(
            resolve(None, &[], &env),
            Err(ExportError::Header { .. })
        ));
    }

    #[test]
    fn compression_timeout_and_protocol_take_the_specifications_values_and_refuse_others() {
        let gzip = [("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")];
        assert!(resolve(None, &[], &gzip).unwrap().gzip);
        assert!(!resolve(None, &[], &[]).unwrap().gzip);
        let bad = [("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "zstd")];
        assert!(matches!(
            resolve(None, &[], &bad),
            Err(ExportError::Setting { .. })
        ));
        assert_eq!(resolve(None, &[], &[]).unwrap().timeout, DEFAULT_TIMEOUT);
        let ms = [("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")];
        assert_eq!(
            resolve(None, &[], &ms).unwrap().timeout,
            Duration::from_millis(2500)
        );
        let bad = [("OTEL_EXPORTER_OTLP_TIMEOUT", "5s")];
        assert!(matches!(
            resolve(None, &[], &bad),
            Err(ExportError::Setting { .. })
        ));
    }

    #[test]
    fn a_certificate_file_that_is_missing_or_holds_no_certificate_is_refused() {
        let missing = [("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")];
        assert!(matches!(
            resolve(None, &[], &missing),
            Err(ExportError::Pem { .. })
        ));
        let empty = [("OTEL_EXPORTER_OTLP_CERTIFICATE", "/dev/null")];
        let err = resolve(None, &[], &empty).err().unwrap();
        assert!(err.to_string().contains("holds no certificate"), "{err}");
        let half = [("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/dev/null")];
        assert!(matches!(
            resolve(None, &[], &half),
            Err(ExportError::Pem { .. })
        ));
    }
}

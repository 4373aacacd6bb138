//! `--prometheus`: `/metrics` over HTTP/1.1, one connection at a time on a thread of its
//! own. Each connection has [`CONNECTION_DEADLINE`] to send its request and take the
//! answer, and a request head is at most [`MAX_HEAD`] bytes: a client that is slow or
//! hostile costs the other scrapers that much, and the profile nothing. Requests are
//! parsed by `httparse` (already in the build through ureq).

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream, ToSocketAddrs,
};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    bind, listen, setsockopt, shutdown, socket, sockopt, AddressFamily, Backlog, Shutdown,
    SockFlag, SockType, SockaddrIn6,
};

use super::exposition::{encode, TextFormat};
use crate::export::board::Board;
use crate::export::error::ExportError;
use crate::export::metrics::Labels;

/// What `/metrics` shows: one profile's board, or a fleet monitor's targets.
pub(crate) trait Shown: Send + Sync + 'static {
    /// Every series as text in `format`, and whether they hold the final values.
    fn text(&self, format: TextFormat) -> (String, bool);
    /// Lingering is over: the server stops.
    fn is_closed(&self) -> bool;
    /// The final values have been served to `scrapers` scrapers (by address).
    fn scraped_final(&self, scrapers: usize);
    /// Waits until what is shown may have changed since generation `seen`, or `until`;
    /// the generation now, `None` once closed.
    fn wait_newer(&self, seen: u64, until: Instant) -> Option<u64>;
}

/// One profile's board and labels.
pub(crate) struct OneTarget {
    pub board: Arc<Board>,
    pub labels: Arc<Labels>,
}

impl Shown for OneTarget {
    fn text(&self, format: TextFormat) -> (String, bool) {
        let (snapshot, _) = self.board.latest();
        (encode(&snapshot, &self.labels, format), snapshot.done)
    }

    fn is_closed(&self) -> bool {
        self.board.is_closed()
    }

    fn scraped_final(&self, scrapers: usize) {
        self.board.set(|s| s.final_scrapers = scrapers);
    }

    fn wait_newer(&self, seen: u64, until: Instant) -> Option<u64> {
        self.board
            .wait_newer(seen, until)
            .map(|(_, generation)| generation)
    }
}

/// How long one connection may take, from accept to the last byte of the answer.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);
/// The largest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// The most scrapers of the final values told apart (`--linger-scrapers` is a u16).
const MAX_FINAL_SCRAPERS: usize = u16::MAX as usize;

pub struct Server {
    addr: SocketAddr,
    /// The listening socket, to wake the thread blocked in accept() at the end.
    listener: TcpListener,
    scrapes: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

/// `ADDR` as the user gave it: anything `HOST:PORT` resolves.
fn resolve(addr: &str) -> Result<SocketAddr, ExportError> {
    let bad = || ExportError::Address(addr.to_owned());
    addr.to_socket_addrs()
        .map_err(|_| bad())?
        .next()
        .ok_or_else(bad)
}

/// Binds `ADDR`: `:PORT` is every address, IPv6 and IPv4 on one socket (IPv4 alone on a
/// machine without IPv6); anything else as it resolves.
fn bind_addr(addr: &str) -> Result<TcpListener, ExportError> {
    let listen_error = |source| ExportError::Listen {
        addr: addr.to_owned(),
        source,
    };
    let Some(port) = addr.strip_prefix(':') else {
        return TcpListener::bind(resolve(addr)?).map_err(listen_error);
    };
    let port: u16 = port
        .parse()
        .map_err(|_| ExportError::Address(addr.to_owned()))?;
    match bind_dual_stack(port) {
        Err(Errno::EAFNOSUPPORT | Errno::EADDRNOTAVAIL) => {
            TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).map_err(listen_error)
        }
        other => other.map_err(|errno| listen_error(errno.into())),
    }
}

/// A listener on `[::]:port` that takes IPv4 too (`IPV6_V6ONLY` off, whatever the
/// system's default).
fn bind_dual_stack(port: u16) -> Result<TcpListener, Errno> {
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
    let every = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0);
    bind(fd.as_raw_fd(), &SockaddrIn6::from(every))?;
    listen(&fd, Backlog::new(128)?)?;
    Ok(TcpListener::from(fd))
}

impl Server {
    /// Binds `addr` now (an address in use fails before anything is profiled) and serves
    /// what `shown` shows from a thread.
    pub fn start(addr: &str, shown: Arc<dyn Shown>) -> Result<Server, ExportError> {
        let listener = bind_addr(addr)?;
        let bound = listener
            .local_addr()
            .map_err(|source| ExportError::Listen {
                addr: addr.to_owned(),
                source,
            })?;
        let scrapes = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&scrapes);
        let accepting = listener.try_clone().map_err(ExportError::Thread)?;
        let thread = thread::Builder::new()
            .name("pfprof-prometheus".into())
            .spawn(move || serve(&accepting, shown.as_ref(), &counted))
            .map_err(ExportError::Thread)?;
        let _ = io::stderr().write_all(
            format!(
                "{}: serving metrics at http://{bound}/metrics\n",
                crate::program_name()
            )
            .as_bytes(),
        );
        Ok(Server {
            addr: bound,
            listener,
            scrapes,
            thread,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// The board is closed: the thread's accept() is woken, and it stops (after a
    /// connection in progress, within its deadline). The summary's note.
    pub fn finish(self, final_scrapers: usize, linger: Duration) -> String {
        // On Linux, shutting a listening socket down fails its accept() with EINVAL.
        let _ = shutdown(self.listener.as_raw_fd(), Shutdown::Both);
        let scrapes = self.scrapes.load(Ordering::Relaxed);
        let url = self.url();
        // Not waited for: a connection in progress ends by its deadline, and the process
        // with the summary.
        drop(self.thread);
        if final_scrapers > 0 {
            let plural = if final_scrapers == 1 { "" } else { "s" };
            format!(
                "prometheus: {url} served {scrapes} scrapes, the last ones with the final values, \
                 to {final_scrapers} scraper{plural}"
            )
        } else {
            format!(
                "prometheus: {url} served {scrapes} scrapes; the final values were not scraped \
                 within --linger {linger:?}"
            )
        }
    }
}

/// Answers one connection after the other until the board is closed. Blocks in accept()
/// meanwhile: no wake-up costs the monitor anything between scrapes. Counts the
/// scrapers, by address, that got the final values.
fn serve(listener: &TcpListener, shown: &dyn Shown, scrapes: &AtomicU64) {
    let mut final_scrapers: HashSet<IpAddr> = HashSet::new();
    while !shown.is_closed() {
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // The socket was shut down at the end, or cannot accept any more (a client
            // that left before its accept, too many open files): the profile goes on.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            Err(_) if shown.is_closed() => return,
            Err(_) => {
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // A client that fails or goes away is its own business.
        if let Ok(Some(done)) = answer(stream, shown) {
            scrapes.fetch_add(1, Ordering::Relaxed);
            if done && final_scrapers.len() < MAX_FINAL_SCRAPERS {
                // An IPv4 scraper of a dual-stack socket is seen as ::ffff:a.b.c.d.
                final_scrapers.insert(peer.ip().to_canonical());
                shown.scraped_final(final_scrapers.len());
            }
        }
    }
}

/// Reads one request and answers it. `Some(final)` for a `/metrics` answer sent whole,
/// `final` when it had the final values.
fn answer(mut stream: TcpStream, shown: &dyn Shown) -> io::Result<Option<bool>> {
    let deadline = Instant::now() + CONNECTION_DEADLINE;
    let Some(request) = read_request(&mut stream, deadline)? else {
        return Ok(None);
    };
    if !request.metrics {
        return refuse(&mut stream, deadline, "404 Not Found", b"try /metrics\n");
    }
    if !request.get {
        return refuse(
            &mut stream,
            deadline,
            "405 Method Not Allowed",
            b"GET only\n",
        );
    }
    let format = TextFormat::negotiate(request.accept.as_deref());
    let (body, done) = shown.text(format);
    respond(
        &mut stream,
        deadline,
        "200 OK",
        format.content_type(),
        body.as_bytes(),
        request.head_only,
    )?;
    Ok(Some(done))
}

/// Reads the request's head; `None` when the client left first or sent what is not
/// HTTP (answered with a 400).
fn read_request(stream: &mut TcpStream, deadline: Instant) -> io::Result<Option<Request>> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    loop {
        stream.set_read_timeout(Some(left(deadline)?))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&head) {
            Ok(httparse::Status::Complete(_)) => return Ok(Some(Request::of(&request))),
            Ok(httparse::Status::Partial) if head.len() < MAX_HEAD => continue,
            _ => return refuse(stream, deadline, "400 Bad Request", b"bad request\n"),
        }
    }
}

/// Answers `status` with a plain-text `body`: no metrics for this request.
fn refuse<T>(
    stream: &mut TcpStream,
    deadline: Instant,
    status: &str,
    body: &[u8],
) -> io::Result<Option<T>> {
    respond(stream, deadline, status, "text/plain", body, false)?;
    Ok(None)
}

struct Request {
    get: bool,
    head_only: bool,
    metrics: bool,
    accept: Option<String>,
}

impl Request {
    /// What the answer depends on, from a parsed head.
    fn of(request: &httparse::Request<'_, '_>) -> Request {
        let accept = request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("accept"))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::to_owned);
        Request {
            get: request.method == Some("GET") || request.method == Some("HEAD"),
            head_only: request.method == Some("HEAD"),
            metrics: request
                .path
                .is_some_and(|p| p == "/metrics" || p.starts_with("/metrics?")),
            accept,
        }
    }
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    Ok(left)
}

fn respond(
    stream: &mut TcpStream,
    deadline: Instant,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    stream.set_write_timeout(Some(left(deadline)?))?;
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::Snapshot;

    fn labels() -> Arc<Labels> {
        Arc::new(Labels {
            target: "t".into(),
            backend: "procfs".into(),
            mode: "strict".into(),
            monitor_pid: "7".into(),
            derived: Vec::new(),
        })
    }

    fn one(board: &Arc<Board>) -> Arc<dyn Shown> {
        Arc::new(OneTarget {
            board: Arc::clone(board),
            labels: labels(),
        })
    }

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn metrics_are_served_in_the_format_the_scraper_accepts_and_other_paths_are_not_found() {
        let board = Arc::new(Board::new(Snapshot::default()));
        let server = Server::start("127.0.0.1:0", one(&board)).unwrap();
        let om = get(server.addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(om.starts_with("HTTP/1.1 200 OK\r\n"), "{om}");
        assert!(
            om.contains("application/openmetrics-text") && om.ends_with("# EOF\n"),
            "{om}"
        );
        let classic = get(
            server.addr,
            "GET /metrics HTTP/1.1\r\nAccept: text/plain;version=0.0.4\r\n\r\n",
        );
        assert!(
            classic.contains("version=0.0.4") && !classic.contains("# EOF"),
            "{classic}"
        );
        assert!(get(server.addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(server.addr, "garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        board.set(|s| s.closed = true);
    }

    #[test]
    fn a_client_that_sends_nothing_does_not_keep_others_waiting_past_its_deadline() {
        let board = Arc::new(Board::new(Snapshot::default()));
        let server = Server::start("127.0.0.1:0", one(&board)).unwrap();
        let _silent = TcpStream::connect(server.addr).unwrap();
        let started = Instant::now();
        let answer = get(server.addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(started.elapsed() < CONNECTION_DEADLINE + Duration::from_secs(2));
        board.set(|s| s.closed = true);
    }

    #[test]
    fn an_address_in_use_is_refused_at_start() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let board = Arc::new(Board::new(Snapshot::default()));
        let err = Server::start(&addr, one(&board)).err().unwrap();
        assert!(matches!(err, ExportError::Listen { .. }), "{err}");
        assert!(matches!(resolve("nonsense"), Err(ExportError::Address(_))));
        assert!(matches!(bind_addr(":x"), Err(ExportError::Address(_))));
    }

    #[test]
    fn every_address_takes_ipv4_and_ipv6_scrapers() {
        let board = Arc::new(Board::new(Snapshot::default()));
        let server = Server::start(":0", one(&board)).unwrap();
        let port = server.addr.port();
        let v4 = get(
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            "GET /metrics HTTP/1.1\r\n\r\n",
        );
        assert!(v4.starts_with("HTTP/1.1 200"), "{v4}");
        if server.addr.is_ipv6() {
            let v6 = get(
                SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
                "GET /metrics HTTP/1.1\r\n\r\n",
            );
            assert!(v6.starts_with("HTTP/1.1 200"), "{v6}");
        }
        board.set(|s| s.closed = true);
    }
}

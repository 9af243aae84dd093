//! A demo kernel and the adapter in front of it, for the suites that drive whole runs.

use super::*;

use iac_agui::kernel::demo::{DemoConfig, DemoKernel};

/// A demo kernel, the adapter in front of it, a private state directory and workspace.
pub struct Stack {
    pub kernel: Arc<DemoKernel>,
    pub server: Option<TestServer>,
    pub dir: PathBuf,
    pub ws: String,
    pub protocol: AguiProtocol,
    pub idle: Duration,
    /// Applied to the adapter's shared state at every (re)start.
    pub tune: fn(Shared) -> Shared,
    /// The stack the adapter's workers get (`None`: the product's).
    pub worker_stack: Option<usize>,
}

/// The tests' demo kernel: token `k-token`, no delay between frames, 100 ms ticks.
fn usual_demo() -> DemoConfig {
    DemoConfig {
        token: Some("k-token".into()),
        frame_delay: Duration::ZERO,
        tick: Duration::from_millis(100),
        cancel_linger: Duration::ZERO,
    }
}

static STACK_N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Stack {
    pub fn new() -> Stack {
        Stack::with(
            AguiProtocol::V0_1,
            ServerConfig::default(),
            Duration::from_secs(30),
        )
    }

    pub fn with(protocol: AguiProtocol, cfg: ServerConfig, idle: Duration) -> Stack {
        Stack::tuned(protocol, cfg, idle, usual_demo(), |s| s)
    }

    /// The usual stack, its adapter's workers on `bytes` of stack.
    pub fn on_worker_stack(bytes: usize) -> Stack {
        let mut s = Stack::unstarted(
            AguiProtocol::V0_1,
            Duration::from_secs(30),
            usual_demo(),
            |s| s,
        );
        s.worker_stack = Some(bytes);
        s.start_server(ServerConfig::default());
        s
    }

    /// The usual demo kernel (100 ms ticks) with `linger` for cancelled tasks, and adapter tuning.
    pub fn lingering(linger: Duration, tune: fn(Shared) -> Shared) -> Stack {
        Stack::tuned(
            AguiProtocol::V0_1,
            ServerConfig::default(),
            Duration::from_secs(30),
            DemoConfig {
                token: Some("k-token".into()),
                frame_delay: Duration::ZERO,
                tick: Duration::from_millis(100),
                cancel_linger: linger,
            },
            tune,
        )
    }

    /// A stack with its own demo-kernel settings and adapter tuning.
    pub fn tuned(
        protocol: AguiProtocol,
        cfg: ServerConfig,
        idle: Duration,
        demo: DemoConfig,
        tune: fn(Shared) -> Shared,
    ) -> Stack {
        let mut s = Stack::unstarted(protocol, idle, demo, tune);
        s.start_server(cfg);
        s
    }

    fn unstarted(
        protocol: AguiProtocol,
        idle: Duration,
        demo: DemoConfig,
        tune: fn(Shared) -> Shared,
    ) -> Stack {
        let n = STACK_N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("iac-agui-stack-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        let dir = std::fs::canonicalize(dir).unwrap();
        let kernel = Arc::new(DemoKernel::start(demo).unwrap());
        let ws = dir.join("ws").to_string_lossy().into_owned();
        Stack {
            kernel,
            server: None,
            dir,
            ws,
            protocol,
            idle,
            tune,
            worker_stack: None,
        }
    }

    /// (Re)start the adapter over the same state directory and kernel.
    pub fn start_server(&mut self, cfg: ServerConfig) {
        if let Some(old) = self.server.take() {
            old.stop();
        }
        // The previous server's last worker may still be exiting and holding the state lock.
        let mut store = FileStore::open(&self.dir.join("state"));
        for _ in 0..200 {
            if store.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            store = FileStore::open(&self.dir.join("state"));
        }
        let store = store.unwrap();
        let mut a2a = A2aConfig::new(self.kernel.base_url(), Some("k-token".into()));
        a2a.idle_timeout = self.idle;
        let shared = Arc::new((self.tune)(
            Shared::new(
                Registry::files(Arc::new(store)),
                A2aClient::new(a2a),
                Arc::new(SystemEnv),
                vec![self.dir.clone()],
                None,
                self.protocol,
            )
            .with_worker_routes(iac_agui::extras::worker_routes()),
        ));
        let backend = Arc::new(AguiBackend { shared });
        let worker_stack = self.worker_stack;
        self.server = Some(TestServer::start_app(
            backend,
            cfg,
            256,
            |app| match worker_stack {
                Some(bytes) => app.with_worker_stack(bytes),
                None => app,
            },
        ));
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.as_ref().unwrap().addr
    }

    pub fn state_file(&self, thread: &str) -> serde_json::Value {
        let p = self
            .dir
            .join("state/threads")
            .join(format!("{thread}.json"));
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    }

    /// A RunAgentInput with the usual forwarded props.
    pub fn body(&self, thread: &str, run: &str, text: &str) -> serde_json::Value {
        serde_json::json!({
            "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": format!("m-{run}"), "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros-1", "cwd": self.ws}},
        })
    }

    pub fn resume_body(
        &self,
        thread: &str,
        run: &str,
        resume: serde_json::Value,
    ) -> serde_json::Value {
        let mut b = self.body(thread, run, "");
        b["messages"] = serde_json::json!([]);
        b["resume"] = resume;
        b
    }

    /// POST a run on a connection of its own and read up to the SSE head (200), for tests
    /// that read the stream piece by piece.
    pub fn open_stream(&self, body: &serde_json::Value) -> Reader {
        let mut r = self.send_run(body);
        assert_eq!(r.head().unwrap().0, 200);
        r
    }

    /// POST a run on a connection of its own; the answer, whatever it is, is the caller's to
    /// read.
    pub fn send_run(&self, body: &serde_json::Value) -> Reader {
        let mut r = Reader::new(self.server.as_ref().unwrap().connect());
        r.sock
            .write_all(&request(
                "POST",
                "/",
                &[("Content-Type", "application/json")],
                &serde_json::to_vec(body).unwrap(),
            ))
            .unwrap();
        r
    }

    pub fn post(&self, body: &serde_json::Value) -> Resp {
        post_json(self.addr(), "/", &[], &serde_json::to_vec(body).unwrap())
    }

    /// POST and require a well-formed SSE stream; returns its events.
    pub fn run(&self, body: &serde_json::Value) -> Vec<serde_json::Value> {
        let r = self.post(body);
        assert_eq!(r.status, 200, "{}", r.text());
        let (events, _) = sse_events(&r.body);
        if let Err(e) = check_stream(&events).and_then(|_| check_ids(&r.body)) {
            panic!("stream rule broken: {e}\n{}", r.text());
        }
        events
    }

    pub fn cancel(&self, execution: &str, thread: &str, ros: &str) -> Resp {
        let body = serde_json::json!({"threadId": thread, "rosInvocationId": ros});
        post_json(
            self.addr(),
            &format!("/extensions/iac-code/v1/executions/{execution}/cancel"),
            &[],
            &serde_json::to_vec(&body).unwrap(),
        )
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

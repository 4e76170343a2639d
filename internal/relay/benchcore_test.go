package relay

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"lhrelay/internal/coresim"
	"lhrelay/internal/pgtest"
)

// Where the benchmarks' simulated core runs. In deployment the core is
// another system: its work is not on the relay's CPUs and its goroutines
// are not in the relay's scheduler. "process" (the default) comes closest
// on one machine: the core runs in a child process (this test binary again,
// see TestMain), so the relay and its ledger writer share the Go scheduler
// only with the channels driving them. "inprocess" runs it as an httptest
// server in the benchmark process, everything on one scheduler: the
// harsher setting, in which a goroutine coming back from an fsync waits for
// a P behind the core's goroutines too.
var benchCoreWhere = flag.String("bench-core", "process",
	`where the benchmarks' simulated core runs: "process" (a child process) or "inprocess"`)

// benchCoreChildEnv makes TestMain serve a simulated core instead of
// running tests.
const benchCoreChildEnv = "LHRELAY_BENCH_CORE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(benchCoreChildEnv) == "1" {
		os.Exit(serveBenchCoreChild())
	}
	pgtest.Main(m)
}

// newBenchSim is the core every benchmark talks to: the account benchBody
// draws from never runs dry.
func newBenchSim() *coresim.Server {
	return coresim.New(coresim.Config{Accounts: []coresim.Account{{Bank: "LHB", Acct: acctRich, Balance: coresim.MaxBalance}}})
}

// serveBenchCoreChild is the child's main: it serves the simulator on a
// free loopback port, prints the base URL as its first line, and serves
// until its standard input closes (the parent closed it, or died). GET
// /_cpu answers the CPU time the child has used, in nanoseconds, so the
// parent can count the core's CPU along with its own.
func serveBenchCoreChild() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench core:", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/", newBenchSim())
	mux.HandleFunc("GET /_cpu", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, int64(processCPU()))
	})
	go http.Serve(ln, mux)
	fmt.Printf("http://%s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// benchCoreHandle is a running simulated core.
type benchCoreHandle struct {
	URL string
	// cpu is the CPU time used so far by a core in its own process; zero
	// for an in-process core, whose CPU time is the benchmark process's.
	cpu func() time.Duration
}

// benchCore starts a simulated core (where -bench-core says), stopped when
// the benchmark (or sub-benchmark run) ends.
func benchCore(b *testing.B) benchCoreHandle {
	b.Helper()
	switch *benchCoreWhere {
	case "inprocess":
		core := httptest.NewServer(newBenchSim())
		b.Cleanup(core.Close)
		return benchCoreHandle{URL: core.URL, cpu: func() time.Duration { return 0 }}
	case "process":
		return startBenchCoreChild(b)
	}
	b.Fatalf("-bench-core %q: want process or inprocess", *benchCoreWhere)
	return benchCoreHandle{}
}

func startBenchCoreChild(b *testing.B) benchCoreHandle {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), benchCoreChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close() // the child's cue to exit
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("bench core child: no address: %v", err)
	}
	url := strings.TrimSpace(line)
	client := &http.Client{Timeout: 5 * time.Second}
	return benchCoreHandle{URL: url, cpu: func() time.Duration {
		resp, err := client.Get(url + "/_cpu")
		if err != nil {
			b.Fatalf("bench core child: cpu: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		ns, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			b.Fatalf("bench core child: cpu: %q: %v", body, err)
		}
		return time.Duration(ns)
	}}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

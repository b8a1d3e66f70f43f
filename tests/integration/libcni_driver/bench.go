package main

// BENCH mode: the benchmark's container runtime. Reads one JSON batch on stdin, runs its
// operations through libcni (or execs a program, for the process-start floor) with the given
// concurrency, as a runtime's goroutines would, and prints one JSON object: the batch's wall time
// and, per operation in input order, the wall time of the call in milliseconds and the error.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
)

type benchOp struct {
	Cmd         string   `json:"cmd"` // ADD, DEL, CHECK, or EXEC (run Program with Env and Stdin)
	Conflist    string   `json:"conflist"`
	ContainerID string   `json:"id"`
	NetNS       string   `json:"netns"`
	IfName      string   `json:"ifname"`
	Args        string   `json:"args"` // CNI_ARGS form: K=V;K=V
	Program     string   `json:"program"`
	Env         []string `json:"env"`
	Stdin       string   `json:"stdin"`
}

type benchBatch struct {
	CacheDir    string    `json:"cacheDir"`
	CNIPath     string    `json:"cniPath"`
	Concurrency int       `json:"concurrency"`
	Ops         []benchOp `json:"ops"`
}

type benchOutcome struct {
	Ms    float64 `json:"ms"`
	Error string  `json:"error,omitempty"`
}

func runBench() {
	var batch benchBatch
	if err := json.NewDecoder(os.Stdin).Decode(&batch); err != nil {
		fail(err)
	}
	lists := map[string]*libcni.NetworkConfigList{}
	for _, op := range batch.Ops {
		if op.Conflist == "" || lists[op.Conflist] != nil {
			continue
		}
		list, err := libcni.ConfListFromFile(op.Conflist)
		if err != nil {
			fail(err)
		}
		lists[op.Conflist] = list
	}
	cni := libcni.NewCNIConfigWithCacheDir(strings.Split(batch.CNIPath, ":"), batch.CacheDir, nil)
	if batch.Concurrency < 1 {
		batch.Concurrency = 1
	}
	outcomes := make([]benchOutcome, len(batch.Ops))
	next := make(chan int)
	var wg sync.WaitGroup
	started := time.Now()
	for w := 0; w < batch.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				outcomes[i] = runOp(cni, lists[batch.Ops[i].Conflist], batch.Ops[i])
			}
		}()
	}
	for i := range batch.Ops {
		next <- i
	}
	close(next)
	wg.Wait()
	wall := float64(time.Since(started).Microseconds()) / 1000
	_ = json.NewEncoder(os.Stdout).Encode(map[string]interface{}{"wallMs": wall, "ops": outcomes})
}

func runOp(cni *libcni.CNIConfig, list *libcni.NetworkConfigList, op benchOp) benchOutcome {
	rt := &libcni.RuntimeConf{ContainerID: op.ContainerID, NetNS: op.NetNS, IfName: op.IfName}
	for _, pair := range strings.Split(op.Args, ";") {
		if kv := strings.SplitN(pair, "=", 2); len(kv) == 2 {
			rt.Args = append(rt.Args, [2]string{kv[0], kv[1]})
		}
	}
	ctx := context.Background()
	started := time.Now()
	var err error
	switch op.Cmd {
	case "ADD":
		_, err = cni.AddNetworkList(ctx, list, rt)
	case "DEL":
		err = cni.DelNetworkList(ctx, list, rt)
	case "CHECK":
		err = cni.CheckNetworkList(ctx, list, rt)
	case "EXEC":
		cmd := exec.Command(op.Program)
		cmd.Env = op.Env
		cmd.Stdin = strings.NewReader(op.Stdin)
		var out []byte
		if out, err = cmd.Output(); err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
	default:
		err = &unknownCommand{op.Cmd}
	}
	out := benchOutcome{Ms: float64(time.Since(started).Microseconds()) / 1000}
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

type unknownCommand struct{ cmd string }

func (u *unknownCommand) Error() string { return "unknown command " + u.cmd }

// A tiny container runtime for Ferry's tests: drives a conflist through the reference libcni
// (Debian's golang-github-appc-cni-dev), exactly as containerd and CRI-O do.
//
// Usage: libcni_driver VALIDATE|ADD|CHECK|DEL CONFLIST CONTAINER_ID NETNS IFNAME CACHE_DIR
// CNI_PATH (colon separated) and CNI_ARGS come from the environment. ADD prints the result.
// `libcni_driver BENCH` runs a batch read from stdin (bench.go).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "BENCH" {
		runBench()
		return
	}
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: libcni_driver VALIDATE|ADD|CHECK|DEL CONFLIST CONTAINER_ID NETNS IFNAME CACHE_DIR")
		os.Exit(2)
	}
	cmd, confPath, containerID, netns, ifname, cacheDir := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	list, err := libcni.ConfListFromFile(confPath)
	if err != nil {
		fail(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(strings.Split(os.Getenv("CNI_PATH"), ":"), cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: containerID, NetNS: netns, IfName: ifname}
	for _, pair := range strings.Split(os.Getenv("CNI_ARGS"), ";") {
		if kv := strings.SplitN(pair, "=", 2); len(kv) == 2 {
			rt.Args = append(rt.Args, [2]string{kv[0], kv[1]})
		}
	}
	ctx := context.Background()
	switch cmd {
	case "VALIDATE":
		caps, err := cni.ValidateNetworkList(ctx, list)
		if err != nil {
			fail(err)
		}
		out, _ := json.Marshal(caps)
		fmt.Println(string(out))
	case "ADD":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		if err := result.Print(); err != nil {
			fail(err)
		}
	case "CHECK":
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	case "DEL":
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown command %s", cmd))
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "libcni: %v\n", err)
	os.Exit(1)
}

// Command harness-cleanup removes what crashed end-to-end test runs left behind:
// network namespaces, UTS namespace mounts, /etc/netns entries and state
// directories of harness clusters whose creating process is gone. Clusters of
// test processes still running are left alone. Needs root.
//
//	go run ./test/harness/cmd/harness-cleanup [-prefix pmh-]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/podmpi/podmpi/test/harness"
)

func main() {
	prefix := flag.String("prefix", harness.DefaultPrefix, "netns name prefix of the clusters to clean up")
	flag.Parse()
	removed, err := harness.CleanupStale(*prefix)
	for _, r := range removed {
		fmt.Println("removed", r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness-cleanup:", err)
		os.Exit(1)
	}
}

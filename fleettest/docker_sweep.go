package fleettest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
)

// ownerLabel names the process that started a container, as
// "<pid namespace>/<pid>/<process start time>", so that a later test binary
// can tell when that process is gone.
const ownerLabel = containerLabel + ".owner"

// processOwner returns the ownerLabel value of process pid, or "" when it
// cannot be read (the process is gone, or /proc is missing).
func processOwner(pid int) string {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		return ""
	}
	start, ok := processStartTime(pid)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s/%d/%s", ns, pid, start)
}

// processStartTime returns field 22 of /proc/<pid>/stat: the time the process
// started, in clock ticks after boot. With the pid it identifies a process
// even when pids are reused.
func processStartTime(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(s[i+1:])
	const startTimeField = 22 - 3 // fields after the command name start at field 3
	if len(fields) <= startTimeField {
		return "", false
	}
	return fields[startTimeField], true
}

// ownerGone reports whether owner names a process in this process's pid
// namespace that no longer runs. Owners in other namespaces, or that cannot
// be parsed, are never reported gone.
func ownerGone(owner string) bool {
	self := processOwner(os.Getpid())
	if self == "" {
		return false
	}
	selfNS, _, _ := strings.Cut(self, "/")
	parts := strings.Split(owner, "/")
	if len(parts) != 3 || parts[0] != selfNS {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	return processOwner(pid) != owner
}

// removeOrphanContainers removes the containers of this package whose owning
// test binary is gone: killed before it could terminate them (Ryuk, which
// would otherwise reap them, is disabled). It returns how many it removed.
func removeOrphanContainers(ctx context.Context, cli client.APIClient) (int, error) {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", ownerLabel),
	})
	if err != nil {
		return 0, fmt.Errorf("fleettest: list containers: %w", err)
	}
	removed := 0
	for _, c := range list.Items {
		if !ownerGone(c.Labels[ownerLabel]) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			return removed, fmt.Errorf("fleettest: remove orphaned container %s: %w", c.ID, err)
		}
		removed++
	}
	return removed, nil
}

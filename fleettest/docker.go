package fleettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// Environment variables read by testcontainers-go that this package pins.
const (
	envRyukDisabled = "TESTCONTAINERS_RYUK_DISABLED"
	envHostOverride = "TESTCONTAINERS_HOST_OVERRIDE"
	envDockerHost   = "DOCKER_HOST"
)

// containerLabel marks the containers this package starts.
const containerLabel = "org.fleetlimit.fleettest"

// dockerPingTimeout bounds the check for a reachable Docker engine.
const dockerPingTimeout = 5 * time.Second

// errNoImage marks a Docker engine without the Postgres image: the
// backend chosen by default falls back to initdb then.
var errNoImage = errors.New("the image is never pulled")

// errUnsafeEnv marks an environment in which testcontainers-go could send
// traffic off the machine or try to pull an image; the docker backend refuses
// to start in it.
var errUnsafeEnv = errors.New("fleettest: unsafe testcontainers environment")

// guardTestcontainersEnv makes testcontainers-go talk to loopback addresses
// only and never start the ryuk reaper: it sets TESTCONTAINERS_RYUK_DISABLED
// and TESTCONTAINERS_HOST_OVERRIDE when they are unset, and returns an error
// wrapping errUnsafeEnv when they, or DOCKER_HOST, say otherwise. It must run
// before any testcontainers-go call, which reads them once per process.
func guardTestcontainersEnv() error {
	if v, ok := os.LookupEnv(envRyukDisabled); ok && v != "true" {
		return fmt.Errorf("%w: %s=%q; it must be \"true\" (the ryuk image cannot be pulled here)", errUnsafeEnv, envRyukDisabled, v)
	}
	if v, ok := os.LookupEnv(envHostOverride); ok && !isLoopbackHost(v) {
		return fmt.Errorf("%w: %s=%q is not a loopback address; unset it or set it to 127.0.0.1", errUnsafeEnv, envHostOverride, v)
	}
	if v := os.Getenv(envDockerHost); v != "" {
		if err := checkDaemonHost(v); err != nil {
			return fmt.Errorf("%w: %s: %v", errUnsafeEnv, envDockerHost, err)
		}
	}
	for name, value := range map[string]string{envRyukDisabled: "true", envHostOverride: "127.0.0.1"} {
		if _, ok := os.LookupEnv(name); ok {
			continue
		}
		if err := os.Setenv(name, value); err != nil {
			return fmt.Errorf("fleettest: set %s: %w", name, err)
		}
	}
	return nil
}

// checkDaemonHost accepts a Docker engine address that stays on this
// machine: a unix socket or TCP to a loopback address.
func checkDaemonHost(host string) error {
	u, err := url.Parse(host)
	if err != nil {
		return fmt.Errorf("engine address %q: %w", host, err)
	}
	switch u.Scheme {
	case "unix", "npipe":
		return nil
	case "tcp", "http", "https":
		if isLoopbackHost(u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("engine address %q is neither a unix socket nor a loopback address", host)
}

// isLoopbackHost reports whether host is "localhost" or a loopback IP.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// dockerClient returns a client for the Docker engine testcontainers-go would
// use, after checking that it is local and answers.
func dockerClient(ctx context.Context) (*testcontainers.DockerClient, error) {
	if err := guardTestcontainersEnv(); err != nil {
		return nil, err
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleettest: no Docker engine reachable: %w", err)
	}
	if err := checkDaemonHost(cli.DaemonHost()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: %v", errUnsafeEnv, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	defer cancel()
	if _, err := cli.Ping(pingCtx, client.PingOptions{}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("fleettest: Docker engine at %s does not answer: %w", cli.DaemonHost(), err)
	}
	return cli, nil
}

// dockerReachable reports whether a local Docker engine answers. Its error
// wraps errUnsafeEnv when the environment is unsafe for testcontainers-go.
func dockerReachable(ctx context.Context) error {
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	return cli.Close()
}

// dockerImage returns FLEET_PG_IMAGE or DefaultImage.
func dockerImage() string {
	if image := os.Getenv(envImage); image != "" {
		return image
	}
	return DefaultImage
}

// startDocker runs a postgres container from the local image with
// testcontainers-go. It never pulls: a missing image is an error that says how
// to build it.
func startDocker(ctx context.Context) (*backend, error) {
	image := dockerImage()
	cli, err := dockerClient(ctx)
	if err != nil {
		if errors.Is(err, errUnsafeEnv) {
			return nil, err
		}
		return nil, fmt.Errorf("%w; start one with scripts/start-dockerd.sh", err)
	}
	defer cli.Close()
	_, err = cli.ImageInspect(ctx, image)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("fleettest: %s backend: image %s is not present locally and no registry is reachable; build it with `make pg-image` (scripts/build-pg-image.sh %s), or set %s=%s: %w",
			BackendDocker, image, image, envBackend, BackendInitdb, errNoImage)
	}
	if err != nil {
		return nil, fmt.Errorf("fleettest: %s backend: inspect image %s: %w", BackendDocker, image, err)
	}

	removed, err := removeOrphanContainers(ctx, cli.Client)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{containerLabel: "true"}
	if owner := processOwner(os.Getpid()); owner != "" {
		labels[ownerLabel] = owner
	}

	const user, password = "postgres", "postgres"
	ctr, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithUsername(user),
		tcpostgres.WithPassword(password),
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithCmdArgs(
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections=300",
		),
		testcontainers.WithTmpfs(map[string]string{"/var/lib/postgresql/data": "rw"}),
		testcontainers.WithHostConfigModifier(publishOnLoopback("5432/tcp")),
		testcontainers.WithLabels(labels),
	)
	if err != nil {
		stopErr := testcontainers.TerminateContainer(ctr)
		return nil, errors.Join(fmt.Errorf("fleettest: %s backend: %w", BackendDocker, err), stopErr)
	}
	terminate := func(ctx context.Context) error {
		return ctr.Terminate(ctx, testcontainers.StopTimeout(5*time.Second))
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err == nil {
		err = checkLoopbackDSN(dsn)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("fleettest: %s backend: %w", BackendDocker, err), terminate(context.WithoutCancel(ctx)))
	}
	b := &backend{name: BackendDocker, adminDSN: dsn, stop: terminate}
	if removed > 0 {
		b.note = fmt.Sprintf("removed %d container(s) orphaned by killed test binaries", removed)
	}
	return b, nil
}

// publishOnLoopback publishes port on an ephemeral host port bound to
// 127.0.0.1 only (Docker's default binds every host interface).
func publishOnLoopback(port string) func(*container.HostConfig) {
	return func(hc *container.HostConfig) {
		p := network.MustParsePort(port)
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		hc.PortBindings[p] = []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "0"}}
	}
}

// checkLoopbackDSN rejects a connection URL whose host is not loopback.
func checkLoopbackDSN(dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return fmt.Errorf("container address: %w", err)
	}
	if !isLoopbackHost(u.Hostname()) {
		return fmt.Errorf("container address %s is not a loopback address", u.Host)
	}
	return nil
}

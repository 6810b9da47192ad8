package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// newToxiproxy returns an in-process toxiproxy server (no API listener)
// whose proxies log nothing.
func newToxiproxy() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
}

// tcpProxy is a toxiproxy proxy listening on 127.0.0.1 at a fixed port.
type tcpProxy struct {
	p    *toxiproxy.Proxy
	addr string
}

func newTCPProxy(srv *toxiproxy.ApiServer, name, upstream string) (*tcpProxy, error) {
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	// Start has returned, so the listener's address is set.
	return &tcpProxy{p: p, addr: p.Listen}, nil
}

// toxic adds a toxic of typ on stream ("upstream": client to server,
// "downstream": server to client).
func (x *tcpProxy) toxic(name, typ, stream string, attrs map[string]any) error {
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "attributes": attrs})
	if err != nil {
		return err
	}
	if _, err := x.p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("proxy %s: add toxic %s: %w", x.p.Name, name, err)
	}
	return nil
}

// both adds a toxic of typ in both directions, named prefix-up and
// prefix-down.
func (x *tcpProxy) both(prefix, typ string, attrs map[string]any) error {
	if err := x.toxic(prefix+"-up", typ, "upstream", attrs); err != nil {
		return err
	}
	return x.toxic(prefix+"-down", typ, "downstream", attrs)
}

// removeBoth removes the toxics added by both.
func (x *tcpProxy) removeBoth(prefix string) error {
	ctx := context.Background()
	err1 := x.p.Toxics.RemoveToxic(ctx, prefix+"-up")
	err2 := x.p.Toxics.RemoveToxic(ctx, prefix+"-down")
	if err1 != nil || err2 != nil {
		return fmt.Errorf("proxy %s: remove toxics %s: %v, %v", x.p.Name, prefix, err1, err2)
	}
	return nil
}

// repoint sends the proxy's new connections to upstream, closing the
// current ones; it keeps listening on the same address.
func (x *tcpProxy) repoint(upstream string) error {
	var err error
	for range 20 {
		err = x.p.Update(&toxiproxy.Proxy{Listen: x.addr, Upstream: upstream, Enabled: true})
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("proxy %s: repoint to %s: %w", x.p.Name, upstream, err)
}

// cut closes every connection, as a proxy or load balancer that restarts
// does, and listens again on the same address.
func (x *tcpProxy) cut() error {
	x.p.Stop()
	var err error
	for range 20 {
		if err = x.p.Start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("proxy %s: listen again on %s: %w", x.p.Name, x.addr, err)
}

// stop closes the listener and every connection.
func (x *tcpProxy) stop() { x.p.Stop() }

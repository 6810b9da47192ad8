package fleet

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// rawH2C is a minimal HTTP/2-with-prior-knowledge server on 127.0.0.1 (no
// x/net: frames by hand, HPACK only for ":status: 200", index 8). On each
// connection the first request's stream is answered after slow; the
// second's is refused (RST_STREAM REFUSED_STREAM) once its headers come,
// which Go's HTTP/2 client retries on the same connection; any other is
// answered at once.
type rawH2C struct {
	addr    string
	headers atomic.Int64 // HEADERS frames seen, all connections
	conns   atomic.Int64
}

func startRawH2C(t *testing.T, slow time.Duration) *rawH2C {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawH2C{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			wg.Go(func() { s.serve(c, slow) })
		}
	})
	return s
}

func (s *rawH2C) serve(c net.Conn, slow time.Duration) {
	defer c.Close()
	var wmu sync.Mutex
	frame := func(typ, flags byte, stream uint32, payload []byte) {
		h := make([]byte, 9, 9+len(payload))
		h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		h[3], h[4] = typ, flags
		binary.BigEndian.PutUint32(h[5:], stream)
		wmu.Lock()
		_, _ = c.Write(append(h, payload...))
		wmu.Unlock()
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	preface := make([]byte, 24)
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	frame(0x4, 0, 0, nil) // SETTINGS
	n := 0
	for {
		var h [9]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags := h[3], h[4]
		stream := binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
		if _, err := io.ReadFull(c, make([]byte, length)); err != nil {
			return
		}
		switch {
		case typ == 0x4 && flags&0x1 == 0:
			frame(0x4, 0x1, 0, nil) // SETTINGS ACK
		case typ == 0x1:
			s.headers.Add(1)
			n++
			switch n {
			case 1:
				go func() {
					time.Sleep(slow)
					frame(0x1, 0x4|0x1, stream, []byte{0x88}) // HEADERS :status 200, END_HEADERS|END_STREAM
				}()
			case 2:
				frame(0x3, 0, stream, []byte{0, 0, 0, 0x7}) // RST_STREAM REFUSED_STREAM
			default:
				frame(0x1, 0x4|0x1, stream, []byte{0x88})
			}
		}
	}
}

// TestTransportKeepsAnH2CConnectionOpen: a refused stream's resend,
// ended as it asks for its connection, is handed a plain connection that
// carries unencrypted HTTP/2, shared with a request in flight on it,
// which must not fail. Through an *http.Transport whose "http" scheme is
// served by a RoundTripper registered on it (RegisterProtocol), the
// connection was closed as an HTTP/1.x one, judged by the base's type,
// and the other request failed ("use of closed network connection", 10
// of 10 runs); with the unencrypted HTTP/2 transport as the base itself,
// it was kept.
func TestTransportKeepsAnH2CConnectionOpen(t *testing.T) {
	t.Parallel()
	for _, registered := range []bool{true, false} {
		t.Run(fmt.Sprintf("registered %v", registered), func(t *testing.T) {
			t.Parallel()
			up := startRawH2C(t, 400*time.Millisecond)
			var h2cOnly http.Protocols
			h2cOnly.SetUnencryptedHTTP2(true)
			inner := &http.Transport{Protocols: &h2cOnly}
			t.Cleanup(inner.CloseIdleConnections)
			base := inner
			if registered {
				base = &http.Transport{}
				base.RegisterProtocol("http", inner)
			}
			cfg := testConfig("k", "a")
			cfg.Limiter = adaptive.Config{InitialLimit: 4, MinLimit: 1, MaxLimit: 4, MaxQueued: 10}
			cfg.MaxRequestDuration = 2 * time.Second
			cfg.AbandonedHold = 50 * time.Millisecond
			n := startNode(t, coord.NewMemory(nil), cfg)

			// Another request, straight through the same base, on the
			// shared HTTP/2 connection.
			other := make(chan error, 1)
			go func() {
				resp, err := (&http.Client{Transport: base}).Get("http://" + up.addr + "/slow")
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if err == nil && resp.ProtoMajor != 2 {
						err = fmt.Errorf("answered over %s, not HTTP/2", resp.Proto)
					}
				}
				other <- err
			}()
			require.Eventually(t, func() bool { return up.headers.Load() == 1 }, 2*time.Second, time.Millisecond)

			req, err := http.NewRequest(http.MethodGet, "http://"+up.addr+"/refused", nil)
			require.NoError(t, err)
			resp, err := (&http.Client{Transport: n.Transport(base)}).Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			t.Logf("fleet request: err=%v; connections=%d, HEADERS frames=%d", err, up.conns.Load(), up.headers.Load())
			require.NoError(t, <-other, "a request on the shared HTTP/2 connection failed: the connection was closed for another request's ended resend")
		})
	}
}

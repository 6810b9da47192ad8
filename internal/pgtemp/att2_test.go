package pgtemp

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// What waitReady makes of answers a port may give while the new server
// is not the one answering (a port race) or cannot fork a backend.
func TestAtt2StartingUpClassification(t *testing.T) {
	cases := map[string][]byte{
		"http":         []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
		"fork failure": append([]byte("Ecould not fork new process for connection: Resource temporarily unavailable\n"), 0),
		"too many (53300)": func() []byte {
			body := []byte("SFATAL\x00C53300\x00Msorry, too many clients already\x00\x00")
			l := len(body) + 4
			return append([]byte{'E', byte(l >> 24), byte(l >> 16), byte(l >> 8), byte(l)}, body...)
		}(),
		"close": nil,
	}
	for name, reply := range cases {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			_, _ = c.Read(buf)
			_, _ = c.Write(reply)
			time.Sleep(50 * time.Millisecond)
			c.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:"+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)+"/postgres?sslmode=disable")
		cancel()
		ln.Close()
		t.Logf("%-16s startingUp=%v err=%v", name, startingUp(err), err)
	}
}

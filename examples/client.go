package examples

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/fleetlimit/fleetlimit/fleet"
)

// Client calls a partner API whose concurrency quota it shares with the
// other processes of the fleet through node. It is safe for concurrent use.
type Client struct {
	baseURL string
	http    *http.Client
}

// NewClient returns a Client for the API at baseURL that admits its
// requests through node.
func NewClient(node *fleet.Node, baseURL string) *Client {
	return &Client{baseURL: baseURL, http: &http.Client{Transport: node.Transport(nil)}}
}

// Get fetches path and returns its body.
func (c *Client) Get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+path, nil)
	if err != nil {
		return nil, fmt.Errorf("examples: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("examples: get %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("examples: get %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("examples: get %s: %s", path, resp.Status)
	}
	return body, nil
}

package examples_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/fleetlimit/fleetlimit/examples"
	"github.com/fleetlimit/fleetlimit/fleet"
)

// Every process of the service runs one node on the key and sends its
// OpenAI calls through it; together they keep the provider's quota.
func ExampleNewOpenAIClient() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	node, err := fleet.New(pool, examples.OpenAINodeConfig("openai:gpt-4o"))
	if err != nil {
		log.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer node.Stop(ctx)

	client := examples.NewOpenAIClient(node, "https://api.openai.com/v1/", os.Getenv("OPENAI_API_KEY"),
		option.WithMaxRetries(4)) // a retry after a 429 waits for a slot again
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	defer stream.Close() // frees the node's slot if the loop stops early
	for stream.Next() {
		if ch := stream.Current().Choices; len(ch) > 0 {
			fmt.Print(ch[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		log.Print(err)
	}
}

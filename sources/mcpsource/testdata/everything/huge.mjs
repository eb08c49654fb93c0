// An MCP server on the official TypeScript SDK (server-everything's own
// copy), for the tests of answers past the bound: its tool "huge" returns
// 17 MiB of text, which the SDK writes as one message with the response's
// id after its result; "echo" returns its message. On stdio; with the
// argument "http", over streamable HTTP (stateless, answers as SSE
// events), its URL written on stdout.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createServer } from "node:http";
import { z } from "zod";

function newServer() {
  const server = new McpServer({ name: "huge", version: "1" });
  server.tool("huge", "Returns 17 MiB of text.", async () => ({
    content: [{ type: "text", text: "x".repeat(17 << 20) }],
  }));
  server.tool("echo", "Returns its message.", { message: z.string() }, async ({ message }) => ({
    content: [{ type: "text", text: message }],
  }));
  return server;
}

if (process.argv[2] === "http") {
  const web = createServer(async (req, res) => {
    const server = newServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => {
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  web.listen(0, "127.0.0.1", () => console.log(`http://127.0.0.1:${web.address().port}/mcp`));
} else {
  await newServer().connect(new StdioServerTransport());
}

// A stdio MCP server on the official TypeScript SDK (server-everything's
// own copy), for TestTypeScriptAnswerPastTheBound: its tool "huge" returns
// 17 MiB of text, which the SDK writes as one line with the response's id
// after its result; "echo" returns its message.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "huge", version: "1" });
server.tool("huge", "Returns 17 MiB of text.", async () => ({
  content: [{ type: "text", text: "x".repeat(17 << 20) }],
}));
server.tool("echo", "Returns its message.", { message: z.string() }, async ({ message }) => ({
  content: [{ type: "text", text: message }],
}));
await server.connect(new StdioServerTransport());

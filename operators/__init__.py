"""Operator library: typed workflow steps that call an executor LLM or the code sandbox.

This package knows nothing about the canvas or MCP; the canvas and the engine build on it.
"""

"""Console routes of policy: the confirmation queue, the MCP tools page."""

from policy import views
from policy.mcp import views as mcp_views

urlpatterns = views.urlpatterns + mcp_views.urlpatterns

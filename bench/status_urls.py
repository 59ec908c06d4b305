"""The project's URLs plus the baseline of `bench/status_tool.py`: a bare DRF view with the same
OAuth2 authentication and scope check as get_action_status, answering a constant."""

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import RequiredScopes
from picnic.urls import urlpatterns as project


class BareView(APIView):
    permission_classes = [RequiredScopes]
    required_scopes = ["read:actions"]

    def get(self, request, action_id):
        return Response({"action_id": action_id})


urlpatterns = [path("bench/bare/<str:action_id>", BareView.as_view()), *project]

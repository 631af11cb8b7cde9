#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
};

struct _11
{
    float _m0[1];
};

struct _14
{
    int _m0[1];
};

struct _17
{
    float _m0[1];
};

struct _20
{
    _4 _m0;
};

static inline __attribute__((always_inline))
uint _22(uint _24, uint _25)
{
    return _24 / ((_25 == 0u) ? 1u : _25);
}

static inline __attribute__((always_inline))
uint _33(uint _34, uint _35)
{
    return _34 % ((_35 == 0u) ? 1u : _35);
}

kernel void main0(const device _11& _10 [[buffer(0)]], const device _14& _13 [[buffer(1)]], device _17& _16 [[buffer(2)]], const device _20& _19 [[buffer(3)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    float _61 = 0.0;
    uint _70 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_70 >= _19._m0._m0)
    {
        return;
    }
    uint _79 = _22(_70, _19._m0._m1);
    if ((_13._m0[_79] >= 0) && (uint(_13._m0[_79]) < _19._m0._m2))
    {
        _61 = _10._m0[(uint(_13._m0[_79]) * _19._m0._m1) + _33(_70, _19._m0._m1)];
    }
    _16._m0[_70] = _61;
}

